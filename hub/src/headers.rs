//! Fetching one shard's safetensors header with HTTP Range requests and no payload byte beyond
//! the speculative first range: one request when the guess covers the header, a second for
//! exactly the missing bytes when it does not.

use harch_guards::truth::header::{self, Header, HeaderError};

use super::client::{Hub, Target};
use super::error::FetchError;

/// Bytes per header entry beyond the tensor name: `"":{"dtype":"F8_E4M3","shape":[7168,2048],
/// "data_offsets":[…,…]},`. Real checkpoints average 70–81 (measured on the seven library
/// models); a little over keeps the common case at one request.
pub const ENTRY_OVERHEAD: u64 = 88;
/// `__metadata__` and the space padding the safetensors writer adds.
pub const HEADER_SLACK: u64 = 512;
/// First range when nothing is known about the file (single-file repos without an index).
pub const DEFAULT_GUESS: u64 = 64 * 1024;

/// First-range size for a shard holding these tensor names (from the index).
pub fn guess_from_names<'a>(names: impl Iterator<Item = &'a str>) -> u64 {
    let entries: u64 = names.map(|n| n.len() as u64 + ENTRY_OVERHEAD).sum();
    header::LEN_PREFIX + entries + HEADER_SLACK
}

pub struct ShardHeader {
    pub file: String,
    /// The JSON header exactly as stored (without the length prefix).
    pub json: Vec<u8>,
    pub header: Header,
    pub etag: Option<String>,
    /// Size of the whole shard file, when the server said.
    pub file_len: Option<u64>,
}

pub async fn fetch_header(
    hub: &Hub,
    sha: &str,
    file: &str,
    guess: u64,
) -> Result<ShardHeader, FetchError> {
    let url = hub.file_url(sha, file);
    let target = Target::File {
        path: file,
        revision: sha,
    };
    let guess = guess.max(header::LEN_PREFIX);
    let first = hub
        .get(&url, &target, Some((0, guess - 1)), Some(guess))
        .await?;
    let invalid = |e: HeaderError| FetchError::Invalid {
        repo: hub.repo.clone(),
        file: file.to_string(),
        message: e.to_string(),
    };
    let mut bytes = first.body;
    let json_len = header::json_len(&bytes).map_err(invalid)?;
    let needed = header::LEN_PREFIX + json_len;
    if let Some(total) = first.total_len
        && needed > total
    {
        return Err(invalid(HeaderError::Truncated {
            needed: json_len,
            have: total.saturating_sub(header::LEN_PREFIX),
        }));
    }
    let have = bytes.len() as u64;
    if have < needed {
        let rest = hub
            .get(&url, &target, Some((have, needed - 1)), Some(needed))
            .await?;
        if rest.partial {
            bytes.extend_from_slice(&rest.body);
        } else {
            // The server ignored Range and sent the file from byte 0.
            bytes = rest.body;
        }
        if (bytes.len() as u64) < needed {
            return Err(FetchError::Network {
                url,
                message: format!("header needs {needed} bytes, got {}", bytes.len()),
                attempts: 1,
            });
        }
    }
    bytes.truncate(needed as usize);
    let header = header::parse_file_prefix(&bytes, first.total_len).map_err(invalid)?;
    bytes.drain(..header::LEN_PREFIX as usize);
    Ok(ShardHeader {
        file: file.to_string(),
        json: bytes,
        header,
        etag: first.etag,
        file_len: first.total_len,
    })
}
