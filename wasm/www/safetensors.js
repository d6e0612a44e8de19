// A safetensors reader for the browser and Node: header checked, tensors as byte views.
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.

/** Bytes per element of the dtypes Strata holds, by safetensors name. */
export const DTYPE_SIZES = {
  F32: 4, F16: 2, BF16: 2, F64: 8, I8: 1, U8: 1, I16: 2, U16: 2, I32: 4, U32: 4, I64: 8, U64: 8, BOOL: 1,
};

/** Largest JSON header accepted (safetensors' own limit is 100 MB). */
const MAX_HEADER = 100_000_000;

/**
 * Parses a safetensors file.
 * @param {ArrayBuffer} buffer the whole file
 * @returns {{tensors: {name: string, dtype: string, shape: number[], bytes: Uint8Array}[],
 *            skipped: {name: string, dtype: string}[]}} tensors sorted by name; tensors of
 *          dtypes Strata does not hold (fp8, ...) are listed in `skipped`
 * @throws {Error} naming what is wrong with the file
 */
export function parseSafetensors(buffer) {
  if (!(buffer instanceof ArrayBuffer)) throw new Error('safetensors: expected an ArrayBuffer');
  if (buffer.byteLength < 8) throw new Error(`safetensors: file is ${buffer.byteLength} bytes, shorter than its 8-byte header length`);
  const n = new DataView(buffer).getBigUint64(0, true);
  if (n > BigInt(Math.min(MAX_HEADER, buffer.byteLength - 8))) {
    throw new Error(`safetensors: header length ${n} exceeds the file (${buffer.byteLength} bytes) or ${MAX_HEADER}`);
  }
  const headerLen = Number(n);
  let header;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(buffer, 8, headerLen)));
  } catch (e) {
    throw new Error(`safetensors: header is not valid JSON: ${e.message}`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw new Error('safetensors: header is not a JSON object');
  }
  const dataStart = 8 + headerLen;
  const dataLen = buffer.byteLength - dataStart;
  const tensors = [];
  const skipped = [];
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const where = `safetensors: tensor ${JSON.stringify(name)}`;
    if (!info || typeof info.dtype !== 'string' || !Array.isArray(info.shape) || !Array.isArray(info.data_offsets) || info.data_offsets.length !== 2) {
      throw new Error(`${where}: needs dtype, shape and data_offsets [begin, end]`);
    }
    const [begin, end] = info.data_offsets;
    if (!Number.isSafeInteger(begin) || !Number.isSafeInteger(end) || begin < 0 || end < begin || end > dataLen) {
      throw new Error(`${where}: data_offsets [${begin}, ${end}] outside the ${dataLen} data bytes`);
    }
    let count = 1;
    for (const d of info.shape) {
      if (!Number.isSafeInteger(d) || d < 0) throw new Error(`${where}: bad dimension ${d}`);
      count *= d;
      if (!Number.isSafeInteger(count)) throw new Error(`${where}: shape too large`);
    }
    const size = DTYPE_SIZES[info.dtype];
    if (size === undefined) {
      skipped.push({ name, dtype: info.dtype });
      continue;
    }
    if (count * size !== end - begin) {
      throw new Error(`${where}: shape [${info.shape}] of ${info.dtype} is ${count * size} bytes, offsets span ${end - begin}`);
    }
    tensors.push({ name, dtype: info.dtype, shape: info.shape, bytes: new Uint8Array(buffer, dataStart + begin, end - begin) });
  }
  tensors.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { tensors, skipped };
}

/**
 * A tensor's bytes as a fresh copy, so a typed-array view on them is aligned.
 * @param {Uint8Array} bytes
 * @returns {Uint8Array}
 */
export function copyBytes(bytes) {
  return new Uint8Array(bytes);
}
