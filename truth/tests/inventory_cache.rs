//! The inventory cache gives back exactly what reading the directory gives, and only for the
//! very bytes it was read from: a changed, added or damaged file is read (and checked) again.

use std::path::{Path, PathBuf};

use harch_guards::truth::Inventory;
use harch_truth::inventory_cache::{InventoryCache, KEEP, entry};
use harch_truth::snapshot::{load_snapshot, try_load_snapshot_cached};
use harch_truth::synth::write_sharded_truth_dir;
use harch_truth::truth_dir::{load_truth_dir, load_truth_dir_cached};

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// Qwen3-30B-A3B (18,867 tensors) as a truth directory of 31 shard headers, and a cache.
fn sharded() -> (tempfile::TempDir, PathBuf, InventoryCache, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let truth = load_snapshot("Qwen/Qwen3-30B-A3B").unwrap();
    let out = dir.path().join("truth");
    write_sharded_truth_dir(&truth, 31, &out).unwrap();
    let root = dir.path().join("cache");
    (dir, out, InventoryCache::new(root.clone()), root)
}

#[test]
fn a_second_read_comes_from_the_cache_and_is_the_same() {
    let (_dir, out, cache, root) = sharded();
    let read = load_truth_dir(&out).unwrap();
    let first = load_truth_dir_cached(&out, Some(&cache)).unwrap();
    assert_eq!(first.inventory, read.inventory);
    let kept = entries(&root);
    assert_eq!(kept.len(), 1, "{kept:?}");
    let second = load_truth_dir_cached(&out, Some(&cache)).unwrap();
    assert_eq!(second.inventory, read.inventory);
    assert_eq!(second.inventory.len(), 18_867);
    assert_eq!(
        second.inventory.find("lm_head.weight").unwrap().shard,
        read.inventory.find("lm_head.weight").unwrap().shard
    );
    assert_eq!(second.config, read.config);
    assert_eq!(entries(&root), kept);
    // The entry is what a read returns: a (well-formed) other inventory in it shows.
    let fewer = Inventory::from_tensors(
        read.inventory.iter().skip(1).map(|t| t.to_info()),
        read.inventory.total_size,
    );
    std::fs::write(&kept[0], entry(&fewer)).unwrap();
    let third = load_truth_dir_cached(&out, Some(&cache)).unwrap();
    assert_eq!(third.inventory, fewer);
    assert_eq!(third.inventory.len(), 18_866);
}

#[test]
fn a_changed_header_is_read_again_and_its_error_reported() {
    let (_dir, out, cache, root) = sharded();
    load_truth_dir_cached(&out, Some(&cache)).unwrap();
    let header = std::fs::read_dir(out.join("shards"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .min()
        .unwrap();
    let text = std::fs::read_to_string(&header).unwrap();
    // One tensor's dtype changed: same length, other bytes.
    let changed = text.replacen("\"BF16\"", "\"F16\" ", 1);
    assert_ne!(changed, text);
    std::fs::write(&header, &changed).unwrap();
    let changed_truth = load_truth_dir_cached(&out, Some(&cache)).unwrap();
    assert_eq!(
        changed_truth.inventory,
        load_truth_dir(&out).unwrap().inventory
    );
    assert!(
        changed_truth
            .inventory
            .iter()
            .any(|t| t.dtype.as_str() == "F16")
    );
    assert_eq!(entries(&root).len(), 2, "a new entry for the new bytes");
    // A header that no longer tiles its payload: the error, not an entry.
    std::fs::write(
        &header,
        text.replacen("\"data_offsets\":[0,", "\"data_offsets\":[1,", 1),
    )
    .unwrap();
    let err = load_truth_dir_cached(&out, Some(&cache)).unwrap_err();
    assert!(
        format!("{err:#}").contains(&*header.file_name().unwrap().to_string_lossy()),
        "{err:#}"
    );
    assert_eq!(entries(&root).len(), 2);
    // Back to the original bytes: the first entry serves again.
    std::fs::write(&header, &text).unwrap();
    assert_eq!(
        load_truth_dir_cached(&out, Some(&cache)).unwrap().inventory,
        load_truth_dir(&out).unwrap().inventory
    );
}

#[test]
fn an_added_header_is_not_covered_by_the_old_entry() {
    let (_dir, out, cache, _root) = sharded();
    load_truth_dir_cached(&out, Some(&cache)).unwrap();
    std::fs::write(
        out.join("shards/stray.safetensors.header.json"),
        br#"{"c":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#,
    )
    .unwrap();
    let err = load_truth_dir_cached(&out, Some(&cache)).unwrap_err();
    assert!(
        format!("{err:#}").contains("which the index does not list"),
        "{err:#}"
    );
}

#[test]
fn a_damaged_entry_is_read_past_and_replaced() {
    let (_dir, out, cache, root) = sharded();
    let want = load_truth_dir_cached(&out, Some(&cache)).unwrap().inventory;
    let entry = entries(&root).pop().unwrap();
    let good = std::fs::read(&entry).unwrap();
    for damaged in [good[..good.len() / 2].to_vec(), Vec::new(), {
        let mut flipped = good.clone();
        flipped[good.len() / 3] ^= 0x40;
        flipped
    }] {
        std::fs::write(&entry, &damaged).unwrap();
        assert_eq!(
            load_truth_dir_cached(&out, Some(&cache)).unwrap().inventory,
            want
        );
        assert_eq!(std::fs::read(&entry).unwrap(), good, "rewritten whole");
    }
}

#[test]
fn directories_with_real_safetensors_files_are_not_kept() {
    let (_dir, out, cache, root) = sharded();
    std::fs::write(out.join("extra.safetensors"), b"").unwrap();
    load_truth_dir_cached(&out, Some(&cache)).unwrap();
    assert!(entries(&root).is_empty());
}

#[test]
fn an_unwritable_cache_costs_nothing_but_time() {
    let (dir, out, _cache, _root) = sharded();
    // The cache root is a file: nothing can be kept under it.
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, b"").unwrap();
    let cache = InventoryCache::new(blocked.join("cache"));
    let truth = load_truth_dir_cached(&out, Some(&cache)).unwrap();
    assert_eq!(truth.inventory, load_truth_dir(&out).unwrap().inventory);
}

#[test]
fn a_bundled_snapshot_is_expanded_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = InventoryCache::new(dir.path().to_path_buf());
    let id = "deepseek-ai/DeepSeek-V2-Lite";
    let want = load_snapshot(id).unwrap();
    let first = try_load_snapshot_cached(id, Some(&cache)).unwrap().unwrap();
    assert_eq!(first.inventory, want.inventory);
    let kept = entries(dir.path());
    assert_eq!(kept.len(), 1);
    let second = try_load_snapshot_cached(id, Some(&cache)).unwrap().unwrap();
    assert_eq!(second.inventory, want.inventory);
    assert_eq!(second.config, want.config);
    assert_eq!(second.model_id.as_deref(), Some(id));
    // What a read returns is the entry: another (well-formed) inventory in it shows.
    let fewer = Inventory::from_tensors(
        want.inventory.iter().skip(1).map(|t| t.to_info()),
        want.inventory.total_size,
    );
    std::fs::write(&kept[0], entry(&fewer)).unwrap();
    let third = try_load_snapshot_cached(id, Some(&cache)).unwrap().unwrap();
    assert_eq!(third.inventory, fewer);
    // Another snapshot has an entry of its own.
    try_load_snapshot_cached("Qwen/Qwen3-8B", Some(&cache)).unwrap();
    assert_eq!(entries(dir.path()).len(), 2);
}

#[test]
fn only_the_newest_entries_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cache");
    std::fs::create_dir_all(&root).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for k in 0..KEEP + 5 {
        let path = root.join(format!("{k:064x}.inv"));
        std::fs::write(&path, b"stale").unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(old + std::time::Duration::from_secs(k as u64))
            .unwrap();
    }
    std::fs::write(root.join("notes.txt"), b"not an entry").unwrap();
    let cache = InventoryCache::new(root.clone());
    load_truth_dir_cached(&sharded().1, Some(&cache)).unwrap();
    let left = entries(&root);
    assert_eq!(left.len(), KEEP + 1, "{left:?}");
    assert!(left.contains(&root.join("notes.txt")));
    // The oldest went first; the newest stayed.
    for k in 0..6 {
        assert!(!left.contains(&root.join(format!("{k:064x}.inv"))), "{k}");
    }
    assert!(left.contains(&root.join(format!("{:064x}.inv", KEEP + 4))));
}
