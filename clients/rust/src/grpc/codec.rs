//! The byte-level pieces of gRPC over HTTP/2: the 5-byte message prefix, the
//! `grpc-timeout` header, `grpc-message` percent-decoding and the base64 of `-bin`
//! headers. No I/O; each function is tested below.

use bytes::{BufMut, Bytes, BytesMut};
use std::time::Duration;

/// Length of the prefix before every gRPC message: 1 byte compressed flag + 4 bytes
/// big-endian length.
pub const PREFIX_LEN: usize = 5;

/// `message` framed for a gRPC body: flag 0 (not compressed), its length (u32, big
/// endian), then its bytes. The caller checks the length against its message cap first
/// (a message over 4 GiB cannot be framed at all).
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// The one message of a unary response body (`body`: every DATA frame concatenated).
/// `Ok(None)` for an empty body (a trailers-only answer); `Err` names what is wrong: a
/// compressed message (never asked for), a truncated prefix or message, or bytes after
/// the message.
pub fn unframe(body: &[u8]) -> Result<Option<&[u8]>, String> {
    if body.is_empty() {
        return Ok(None);
    }
    if body.len() < PREFIX_LEN {
        return Err(format!("a response body of {} bytes is shorter than the 5-byte gRPC prefix", body.len()));
    }
    if body[0] != 0 {
        return Err(format!("the response message is compressed (flag {}), which this client never asks for", body[0]));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let rest = &body[PREFIX_LEN..];
    if rest.len() < len {
        return Err(format!("the response message is truncated: {} of {len} bytes", rest.len()));
    }
    if rest.len() > len {
        return Err(format!("{} bytes follow the response message of a unary call", rest.len() - len));
    }
    Ok(Some(rest))
}

/// The `grpc-timeout` header value of `timeout`: at most 8 digits and a unit, the finest
/// unit that fits (`n` nanoseconds, `u` µs, `m` ms, `S` s, `M` min, `H` h), rounded up so
/// the server never cuts a call sooner than the client would.
pub fn timeout_header(timeout: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    for (unit, per) in [("n", 1u128), ("u", 1_000), ("m", 1_000_000), ("S", 1_000_000_000), ("M", 60_000_000_000),
                        ("H", 3_600_000_000_000)] {
        let value = (nanos + per - 1) / per;
        if value <= MAX {
            return format!("{value}{unit}");
        }
    }
    format!("{MAX}H")
}

/// `grpc-message` decoded: `%XX` escapes back to bytes, then UTF-8 (invalid sequences
/// replaced). A `%` not followed by two hex digits is kept as it is, as the gRPC spec asks.
pub fn percent_decode(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%' && i + 2 < value.len() {
            if let (Some(hi), Some(lo)) = (hex(value[i + 1]), hex(value[i + 2])) {
                out.push(hi * 16 + lo);
                i += 3;
                continue;
            }
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A `-bin` header value decoded: standard base64, padded or not (gRPC servers send it
/// unpadded). `Err` for a character outside the alphabet or an impossible length.
pub fn base64_decode(value: &[u8]) -> Result<Vec<u8>, String> {
    let trimmed: Vec<u8> = value.iter().copied().filter(|&b| b != b'=' && !b.is_ascii_whitespace()).collect();
    if trimmed.len() % 4 == 1 {
        return Err(format!("a base64 value of {} characters is impossible", trimmed.len()));
    }
    let mut out = Vec::with_capacity(trimmed.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &b in &trimmed {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return Err(format!("{:?} is not a base64 character", b as char)),
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_flag_length_and_bytes() {
        assert_eq!(&frame(b"abc")[..], &[0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(&frame(b"")[..], &[0, 0, 0, 0, 0]);
    }

    #[test]
    fn unframe_reads_back_one_message_and_refuses_damaged_bodies() {
        assert_eq!(unframe(&frame(b"hello")).unwrap(), Some(&b"hello"[..]));
        assert_eq!(unframe(&frame(b"")).unwrap(), Some(&b""[..]));
        assert_eq!(unframe(b"").unwrap(), None);
        assert!(unframe(&[0, 0, 0]).unwrap_err().contains("shorter"));
        assert!(unframe(&[1, 0, 0, 0, 0]).unwrap_err().contains("compressed"));
        assert!(unframe(&[0, 0, 0, 0, 4, 1]).unwrap_err().contains("truncated"));
        assert!(unframe(&[0, 0, 0, 0, 1, 1, 2]).unwrap_err().contains("follow"));
    }

    #[test]
    fn the_timeout_header_takes_the_finest_unit_of_at_most_8_digits_rounded_up() {
        assert_eq!(timeout_header(Duration::from_nanos(1)), "1n");
        assert_eq!(timeout_header(Duration::from_nanos(99_999_999)), "99999999n");
        assert_eq!(timeout_header(Duration::from_nanos(100_000_001)), "100001u");
        assert_eq!(timeout_header(Duration::from_secs(10)), "10000000u");
        assert_eq!(timeout_header(Duration::from_secs(100)), "100000m");
        assert_eq!(timeout_header(Duration::from_secs(200_000)), "200000S");
        assert_eq!(timeout_header(Duration::from_secs(u64::MAX)), "99999999H");
    }

    #[test]
    fn percent_decoding_restores_utf8_and_keeps_stray_percent_signs() {
        assert_eq!(percent_decode(b"caf%C3%A9 %E2%82%AC"), "café €");
        assert_eq!(percent_decode(b"100% sure"), "100% sure");
        assert_eq!(percent_decode(b"ends with %"), "ends with %");
        assert_eq!(percent_decode(b"%4"), "%4");
        assert_eq!(percent_decode(b"%41"), "A");
    }

    #[test]
    fn base64_decodes_padded_and_unpadded_values() {
        assert_eq!(base64_decode(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode(b"aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode(b"aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode(b"").unwrap(), b"");
        assert_eq!(base64_decode(b"/+8=").unwrap(), vec![0xff, 0xef]);
        assert!(base64_decode(b"a").is_err());
        assert!(base64_decode(b"a*bc").is_err());
    }
}
