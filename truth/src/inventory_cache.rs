//! Checked inventories, kept by the bytes they were read from.
//!
//! An agent validates its spec against one truth directory again and again. For DeepSeek-V3
//! that directory is 20 MB of JSON (the index and 163 shard headers) and reading it was most
//! of what `validate` cost. The cache keeps the inventory a directory gave once it was read and
//! every check on it passed; the next `validate` of the same bytes reads the inventory back.
//!
//! The key is the BLAKE3 hash of every byte the inventory is built from (the index, each shard
//! header by name, the sizes truth.json records) and of the running executable's identity
//! (size and modification time), so a changed file, a new file or a rebuilt harch never sees
//! an old entry. Directories that hold real `.safetensors` files are read every time (their
//! headers are a prefix of files too large to hash). A bundled snapshot's inventory is kept by
//! its compressed lines (expanding DeepSeek-V3's 43 lines into 91,991 tensors is most of a
//! `validate` of it). What failed a check is never kept: errors are found, and reported, every
//! time.
//!
//! An entry is as trustworthy as the directory it lives in. The default is under the user's
//! cache directory; the worker verifies an agent's spec with its own process and directory,
//! which a sandboxed agent cannot write (its HOME is private).

use std::path::PathBuf;

use harch_guards::truth::{Inventory, packed};

/// Bump when the encoding or the meaning of an entry changes.
const FORMAT: &str = "harch inventory cache 1";

pub struct InventoryCache {
    root: PathBuf,
}

/// BLAKE3 hash of an inventory's inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl InventoryCache {
    pub fn new(root: PathBuf) -> InventoryCache {
        InventoryCache { root }
    }

    /// `$HARCH_INVENTORY_CACHE` (`off` turns the cache off), else
    /// `$XDG_CACHE_HOME/harch/inventory`, else `~/.cache/harch/inventory`.
    pub fn from_env() -> Option<InventoryCache> {
        if let Some(d) = std::env::var_os("HARCH_INVENTORY_CACHE") {
            if d == "off" || d.is_empty() {
                return None;
            }
            return Some(InventoryCache::new(PathBuf::from(d)));
        }
        crate::cache_dir::harch_cache_dir("inventory").map(InventoryCache::new)
    }

    fn path(&self, key: &Key) -> PathBuf {
        let hex: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
        self.root.join(format!("{hex}.inv"))
    }

    /// The inventory kept under `key`; `None` when there is none or it is damaged.
    pub fn get(&self, key: &Key) -> Option<Inventory> {
        let file = std::fs::File::open(self.path(key)).ok()?;
        // SAFETY: read-only, and dropped once decoded. Entries are written whole and renamed
        // into place, never rewritten in place, so a mapped entry does not change under us.
        let bytes = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let (body, sum) = bytes.split_at(bytes.len().checked_sub(4)?);
        if crc32fast::hash(body).to_le_bytes() != sum {
            return None;
        }
        packed::decode(body)
    }

    /// Keeps `inventory` under `key`, replacing any entry atomically, and drops the oldest
    /// entries beyond [`KEEP`].
    pub fn put(&self, key: &Key, inventory: &Inventory) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        harch_files::write_atomic(&self.path(key), &entry(inventory))?;
        self.prune(KEEP)
    }

    /// Removes all but the `keep` newest entries (every rebuild of harch starts new ones).
    fn prune(&self, keep: usize) -> std::io::Result<()> {
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&self.root)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".inv"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if found.len() <= keep {
            return Ok(());
        }
        found.sort_unstable_by(|a, b| b.cmp(a));
        for (_, old) in &found[keep..] {
            // Another process may have removed it first.
            let _ = std::fs::remove_file(old);
        }
        Ok(())
    }
}

/// Entries kept at most: DeepSeek-V3's is 7 MB.
pub const KEEP: usize = 32;

/// An entry's bytes: the encoded inventory and its CRC-32, which [`InventoryCache::get`]
/// checks (a damaged entry is read past, not trusted).
pub fn entry(inventory: &Inventory) -> Vec<u8> {
    let mut bytes = packed::encode(inventory);
    let sum = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes
}

/// The key of inputs given as (name, digest) pairs, in a fixed order; `None` when this
/// executable cannot be told from another build (then nothing may be kept).
pub fn key<'a>(inputs: impl IntoIterator<Item = (&'a str, [u8; 32])>) -> Option<Key> {
    let mut h = blake3::Hasher::new();
    h.update(FORMAT.as_bytes());
    h.update(&[0]);
    h.update(executable_identity()?.as_bytes());
    for (name, digest) in inputs {
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(&digest);
    }
    Some(Key(h.finalize().into()))
}

/// BLAKE3 of one input's bytes.
pub fn digest(bytes: &[u8]) -> [u8; 32] {
    blake3::hash(bytes).into()
}

/// The running executable, as far as telling one build from another needs: the checks an entry
/// passed are the code's.
fn executable_identity() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::env::current_exe().and_then(std::fs::metadata).ok()?;
    Some(format!(
        "{} {} {}.{} {}",
        env!("CARGO_PKG_VERSION"),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ino()
    ))
}
