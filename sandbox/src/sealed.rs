//! Settings sealed into a copy of a program's own bytes.
//!
//! A sandboxed process controls its environment, arguments and working directory, and can copy
//! any file it can read, so settings passed through any of those (or kept in a file beside the
//! program) are its to change. A copy of the program whose bytes carry the settings keeps them
//! wherever it is copied and however it is started (exec, the dynamic loader): to change them a
//! process must rewrite the program itself.
//!
//! Every program linking this module holds one slot, `MARK` then a length then the payload, in
//! its read-only data. [`seal`] finds the slot in a program's bytes (by the slot's unsealed
//! contents, read from this very process, so no second copy of the mark is needed to find it)
//! and writes the payload there; [`sealed`] reads this process's slot.

use crate::SandboxError;

const SLOT_LEN: usize = 4096;
const HEADER: usize = 20;
/// The largest payload a slot holds.
pub const MAX_PAYLOAD: usize = SLOT_LEN - HEADER;

const fn unsealed_slot() -> [u8; SLOT_LEN] {
    const MARK: &[u8; 16] = b"harch sealed set";
    let mut slot = [0u8; SLOT_LEN];
    let mut i = 0;
    while i < MARK.len() {
        slot[i] = MARK[i];
        i += 1;
    }
    slot
}

/// Page-aligned: an ELF file maps its segments at file offsets congruent to their addresses
/// modulo the page size, so the slot lies at a multiple of 4096 in the file and [`seal`] finds
/// it without comparing at every byte (it still does when it must).
#[repr(C, align(4096))]
struct Slot([u8; SLOT_LEN]);

#[used]
static SLOT: Slot = Slot(unsealed_slot());

/// This process's slot as its program file holds it. A volatile read: the compiler knows the
/// static's initial value and would otherwise fold every read to "unsealed".
fn slot() -> [u8; SLOT_LEN] {
    // SAFETY: `SLOT.0` is a valid, aligned, initialized static of this type.
    unsafe { std::ptr::read_volatile(&raw const SLOT.0) }
}

/// Where `needle` occurs in `program`: at page-aligned offsets when it is there, else anywhere.
fn occurrences(program: &[u8], needle: &[u8]) -> Vec<usize> {
    let aligned: Vec<usize> = program
        .chunks_exact(SLOT_LEN)
        .enumerate()
        .filter(|(_, c)| *c == needle)
        .map(|(i, _)| i * SLOT_LEN)
        .collect();
    if !aligned.is_empty() {
        return aligned;
    }
    program
        .windows(SLOT_LEN)
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .take(2)
        .collect()
}

/// The payload sealed into the running program, or `None` for an unsealed one.
pub fn sealed() -> Option<Vec<u8>> {
    let slot = slot();
    let len = u32::from_le_bytes(slot[16..HEADER].try_into().ok()?) as usize;
    (len > 0 && len <= MAX_PAYLOAD).then(|| slot[HEADER..HEADER + len].to_vec())
}

/// `program` (the bytes of a program built with this module, unsealed) with `payload` sealed
/// into its slot. Refused when the running program is itself sealed, when `program` holds no
/// unsealed slot or more than one, or when the payload does not fit.
pub fn seal(program: &[u8], payload: &[u8]) -> Result<Vec<u8>, SandboxError> {
    let refuse = |why: String| SandboxError::Seal(why);
    if sealed().is_some() {
        return Err(refuse("a sealed program cannot seal another".into()));
    }
    if payload.is_empty() || payload.len() > MAX_PAYLOAD {
        return Err(refuse(format!(
            "a payload of {} bytes (1 to {MAX_PAYLOAD} fit)",
            payload.len()
        )));
    }
    let at = match occurrences(program, &slot())[..] {
        [at] => at,
        [] => return Err(refuse("the program has no unsealed slot".into())),
        _ => return Err(refuse("the program has more than one slot".into())),
    };
    let mut out = program.to_vec();
    let len = u32::try_from(payload.len()).map_err(|e| refuse(e.to_string()))?;
    out[at + 16..at + HEADER].copy_from_slice(&len.to_le_bytes());
    out[at + HEADER..at + HEADER + payload.len()].copy_from_slice(payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_in_a_program_is_found_and_filled_once() {
        assert_eq!(sealed(), None);
        let mut program = b"ELF header and code".to_vec();
        program.extend_from_slice(&slot());
        program.extend_from_slice(b"more code");
        let out = seal(&program, b"{\"guards\":\"weight\"}").unwrap();
        assert_eq!(out.len(), program.len());
        let at = 19;
        assert_eq!(&out[at..at + 16], b"harch sealed set");
        assert_eq!(&out[at + 16..at + 20], &19u32.to_le_bytes());
        assert_eq!(&out[at + 20..at + 39], b"{\"guards\":\"weight\"}");
        assert!(out.ends_with(b"more code"));
        // A sealed copy has no unsealed slot left; two slots are ambiguous; nothing to seal.
        assert!(seal(&out, b"x").is_err());
        let mut twice = program.clone();
        twice.extend_from_slice(&slot());
        assert!(seal(&twice, b"x").is_err());
        // At a page-aligned offset, as in an ELF file.
        let mut paged = vec![0u8; 2 * SLOT_LEN];
        paged.extend_from_slice(&slot());
        let out = seal(&paged, b"y").unwrap();
        assert_eq!(&out[2 * SLOT_LEN + 20..2 * SLOT_LEN + 21], b"y");
        assert!(seal(&program, b"").is_err());
        assert!(seal(&program, &vec![b'x'; MAX_PAYLOAD + 1]).is_err());
    }
}
