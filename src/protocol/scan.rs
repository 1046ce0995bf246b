//! The inner loop of the large-message check ([`super::check`]): how many bytes at the start
//! of a slice a JSON string holds as they are (printable ASCII other than `"` and `\`). A
//! 10 MiB result is mostly one long string, so this loop is most of the check's time, and the
//! check runs on every large message a server sends (stdio lines, HTTP JSON bodies, SSE data
//! lines), on the thread that then writes the API's answer.
//!
//! On x86-64 it tests 32 bytes at a time with AVX2 when the CPU has it (found once at run
//! time), else 16 at a time with SSE2 (every x86-64 CPU has it); elsewhere a block of 32 bytes
//! is folded into one test (a loop the compiler turns into vector compares). On a 2-core AMD
//! EPYC VM, over 10 MiB of plain bytes (`tests` below measure nothing; see the README): the
//! fold 0.96 ms, SSE2 0.45 ms, AVX2 0.22 ms, as long as `memchr` takes to find a byte.
//!
//! Owns: that one loop. Must not touch: anything but the bytes it is given.

/// Whether a string holds `b` as it is.
#[inline]
fn plain(b: u8) -> bool {
    (0x20..0x80).contains(&b) && b != b'"' && b != b'\\'
}

/// How many bytes at the start of `s` are plain (see the module's documentation).
#[inline]
pub fn plain_len(s: &[u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (just tested).
            return unsafe { x86::plain_len_avx2(s) };
        }
        x86::plain_len_sse2(s)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        plain_len_fold(s)
    }
}

/// The portable loop: a block of 32 bytes tested as one (a loop without an early exit, which
/// the compiler makes vector compares of); the block that holds a stop is read a byte at a
/// time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn plain_len_fold(s: &[u8]) -> usize {
    let mut i = 0;
    while let Some(block) = s.get(i..i + 32) {
        let stops = block.iter().fold(0u8, |acc, &b| acc | u8::from(!plain(b)));
        if stops != 0 {
            break;
        }
        i += 32;
    }
    i + tail(&s[i..])
}

/// The plain bytes at the start of `s`, one at a time (what is left after the blocks).
#[inline]
fn tail(s: &[u8]) -> usize {
    s.iter().position(|&b| !plain(b)).unwrap_or(s.len())
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::tail;
    use std::arch::x86_64::*;

    /// 16 bytes at a time. A byte is plain when, read as a signed byte, it is above 0x1F (so
    /// 0x20..=0x7F: 0x80 and up are negative) and is neither `"` nor `\`.
    pub(super) fn plain_len_sse2(s: &[u8]) -> usize {
        let mut i = 0;
        // SAFETY: SSE2 is part of x86-64; each load reads `s[i..i + 16]`, within `s`.
        unsafe {
            let low = _mm_set1_epi8(0x1F);
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            while i + 16 <= s.len() {
                let x = _mm_loadu_si128(s.as_ptr().add(i).cast());
                let special = _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash));
                let ok = _mm_andnot_si128(special, _mm_cmpgt_epi8(x, low));
                let mask = _mm_movemask_epi8(ok) as u32;
                if mask != 0xFFFF {
                    return i + (!mask).trailing_zeros() as usize;
                }
                i += 16;
            }
        }
        i + tail(&s[i..])
    }

    /// 32 bytes at a time, as [`plain_len_sse2`] tests 16.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn plain_len_avx2(s: &[u8]) -> usize {
        let mut i = 0;
        let low = _mm256_set1_epi8(0x1F);
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        while i + 32 <= s.len() {
            // SAFETY: reads `s[i..i + 32]`, within `s`.
            let x = unsafe { _mm256_loadu_si256(s.as_ptr().add(i).cast()) };
            let special =
                _mm256_or_si256(_mm256_cmpeq_epi8(x, quote), _mm256_cmpeq_epi8(x, backslash));
            let ok = _mm256_andnot_si256(special, _mm256_cmpgt_epi8(x, low));
            let mask = _mm256_movemask_epi8(ok) as u32;
            if mask != u32::MAX {
                return i + (!mask).trailing_zeros() as usize;
            }
            i += 32;
        }
        i + tail(&s[i..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way of scanning, for the tests: the dispatcher, the portable loop, and on x86-64
    /// each vector width this CPU has.
    type Way = (&'static str, fn(&[u8]) -> usize);

    fn ways() -> Vec<Way> {
        let mut ways: Vec<Way> = vec![("plain_len", plain_len), ("fold", plain_len_fold)];
        #[cfg(target_arch = "x86_64")]
        {
            ways.push(("sse2", x86::plain_len_sse2));
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (just tested).
                ways.push(("avx2", |s| unsafe { x86::plain_len_avx2(s) }));
            }
        }
        ways
    }

    #[test]
    fn every_byte_value_stops_a_scan_or_not_at_every_position() {
        let ways = ways();
        for len in [0usize, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    let want = if plain(b) { len } else { at };
                    for (name, f) in &ways {
                        assert_eq!(f(&s), want, "{name}: byte {b:#04x} at {at} of {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_way_agrees_on_mixed_text_from_every_offset() {
        // Plain runs of every length between stops of each kind (a quote, a backslash, a
        // control character, a byte of a UTF-8 sequence, DEL's neighbours).
        let stops = [b'"', b'\\', b'\n', 0x00, 0x1F, 0x80, 0xC3, 0xFF];
        let mut text = Vec::new();
        for run in 0..70 {
            text.extend(std::iter::repeat_n(b'x', run));
            text.push(stops[run % stops.len()]);
            text.extend_from_slice(b" ~\x7f");
        }
        let ways = ways();
        for from in 0..text.len() {
            let want = tail(&text[from..]);
            for (name, f) in &ways {
                assert_eq!(f(&text[from..]), want, "{name} from {from}");
            }
        }
    }
}
