//! The capped line reader both ends of the admin socket use: one
//! `\n`-terminated line into a caller's buffer, never buffering more than a
//! cap, so a peer that never sends a newline costs bounded memory. It reads
//! from whatever `BufRead` it is given and does nothing else.

use std::io::{self, BufRead};

/// What `read_line_capped` found.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A line (without its newline and a trailing `\r`) is in the buffer; a
    /// last line without a newline before end of stream counts too.
    Line,
    Eof,
    /// More than the cap arrived without a newline.
    TooLong,
}

/// Read one `\n`-terminated line of at most `cap` bytes (newline and a
/// trailing `\r` stripped) into `line`, never buffering more than `cap`
/// bytes of it.
pub fn read_line_capped(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: usize,
) -> io::Result<LineRead> {
    line.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(if line.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (chunk, found_end) = match available.iter().position(|byte| *byte == b'\n') {
            Some(end) => (end, true),
            None => (available.len(), false),
        };
        if line.len() + chunk > cap {
            return Ok(LineRead::TooLong);
        }
        line.extend_from_slice(&available[..chunk]);
        reader.consume(if found_end { chunk + 1 } else { chunk });
        if found_end {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(LineRead::Line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    /// Proves the capped reader: lines split across reads, CRLF, a last line
    /// without a newline, end of stream, and the cap on both sides of it.
    #[test]
    fn capped_line_reader() {
        let mut reader = BufReader::with_capacity(3, &b"ab\r\ncdefgh\nlast"[..]);
        let mut line = Vec::new();
        for expected in [&b"ab"[..], b"cdefgh", b"last"] {
            assert_eq!(
                read_line_capped(&mut reader, &mut line, 10).unwrap(),
                LineRead::Line
            );
            assert_eq!(line, expected);
        }
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 10).unwrap(),
            LineRead::Eof
        );
        let mut reader = BufReader::with_capacity(4, &b"0123456789X\n"[..]);
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 10).unwrap(),
            LineRead::TooLong
        );
        let mut reader = BufReader::with_capacity(64, &b"0123456789X\n"[..]);
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 10).unwrap(),
            LineRead::TooLong
        );
        let mut reader = BufReader::with_capacity(64, &b"0123456789\n"[..]);
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 10).unwrap(),
            LineRead::Line
        );
        assert_eq!(line, b"0123456789");
    }
}
