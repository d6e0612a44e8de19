// A small static server for wasm/www (any static server works; this one needs nothing).
//   node wasm/test/serve.mjs [PORT]      then open http://127.0.0.1:PORT/
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const WWW = resolve(fileURLToPath(new URL('../www/', import.meta.url)));
const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm', '.json': 'application/json', '.safetensors': 'application/octet-stream',
  '.ts': 'text/plain; charset=utf-8', '.png': 'image/png',
};

/**
 * Serves wasm/www on 127.0.0.1.
 * @param {number} port 0 for any free port
 * @returns {Promise<{server: import('node:http').Server, url: string}>}
 */
export function serve(port = 0) {
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
      const file = normalize(join(WWW, path.endsWith('/') ? `${path}index.html` : path));
      if (file !== WWW && !file.startsWith(WWW + sep)) throw Object.assign(new Error('outside'), { code: 'ENOENT' });
      const body = await readFile(file);
      res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' });
      res.end(body);
    } catch (e) {
      res.writeHead(e.code === 'ENOENT' || e.code === 'EISDIR' ? 404 : 500, { 'content-type': 'text/plain' });
      res.end(String(e.code ?? e.message));
    }
  });
  return new Promise((ok) => server.listen(port, '127.0.0.1', () => ok({ server, url: `http://127.0.0.1:${server.address().port}/` })));
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { url } = await serve(Number(process.argv[2] ?? 8080));
  console.log(`serving ${WWW} at ${url}`);
}
