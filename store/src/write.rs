//! The write path shared by `put` and `save_checkpoint`: plan and encode in a read
//! transaction, then insert everything in one write transaction.

use crate::error::{DbContext, Result, StoreError};
use crate::plan::{plan, NewVersion};
use crate::reader::Fetcher;
use crate::rebase::{delete_version, load_checkpoint_record};
use crate::record::checkpoint_key;
use crate::record::CheckpointRecord;
use crate::record::Stored;
use crate::store::Store;

impl Store {
    /// Writes `items` (and the checkpoint record, if any) atomically.
    pub(crate) fn write_versions(
        &self,
        items: &[NewVersion<'_>],
        overwrite: bool,
        checkpoint: Option<(u64, CheckpointRecord)>,
    ) -> Result<()> {
        let _writer = self.writer.lock();
        let planned = {
            let r = self.read()?;
            if let Some((step, _)) = &checkpoint {
                if r.checkpoints
                    .get(*step)
                    .ctx("reading checkpoints")?
                    .is_some()
                {
                    return Err(StoreError::CheckpointExists { step: *step });
                }
            }
            let mut fetcher = Fetcher::new(&r.t, &self.cache);
            let rules = self.rules.read();
            plan(
                &mut fetcher,
                &r.t.versions,
                &self.cache,
                &self.opts,
                items,
                overwrite,
                &rules,
            )?
        };
        self.write(|wt| {
            for v in &planned {
                if v.replaces {
                    delete_version(wt, &self.cache, &self.opts, &v.name, v.step, false)?;
                }
                for (b, seg) in v.segments.iter().enumerate() {
                    let block = v.record.blocks[b];
                    wt.add_ref(&v.name, v.step, b as u64, block.address, seg.as_deref())?;
                }
                wt.put_version(&v.name, v.step, &v.record)?;
                if let Some((policy, residuals)) = &v.tiered {
                    crate::tiers::write::add_tier_rows(
                        wt,
                        v,
                        policy,
                        residuals,
                        self.opts.tiering.clock.now(),
                    )?;
                }
            }
            if let Some((step, cp)) = &checkpoint {
                if load_checkpoint_record(&wt.checkpoints, *step)?.is_some() {
                    return Err(StoreError::CheckpointExists { step: *step });
                }
                wt.checkpoints
                    .insert(*step, cp.to_stored(&checkpoint_key(*step)).as_slice())
                    .ctx("writing a checkpoint")?;
            }
            Ok(())
        })
    }
}
