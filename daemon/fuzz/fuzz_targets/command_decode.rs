//! Fuzz target `command_decode`: every command code and operation byte
//! against an arbitrary body. The first input bytes choose the header (an
//! operation byte, a command code for NonReplicated, the request and session
//! numbers); the rest is the body given to `Command::decode`. An input that
//! starts with a whole request header (command byte 5 at offset 60, as in
//! the golden SDK frames used as seeds) keeps that header instead.
//!
//! Properties: nothing panics; an accepted command reports the operation it
//! travelled with; a decoder that accepts a body must describe it fully, so
//! re-encoding the command with the test kit's SDK-layout encoder (through
//! the e2e tests' `request_of`) decodes to the same command (Register and
//! the cluster-routing codes excepted: Register keeps both credential
//! parses and routing bodies are not decoded); every error maps to exactly
//! one server action.

#![no_main]

use iggyd_wire::protocol::codes::{CommandCode, Operation};
use iggyd_wire::protocol::limits::HEADER_SIZE;
use iggyd_wire::protocol::{Command, RequestHeader};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/e2e/request_of.rs"]
mod request_of;

/// Reads the header choice from the first four bytes:
/// `[selector][code lo][code hi][flags]`. Selector 0..=27 picks one of the
/// 28 operations, 28..=82 sends one of the 55 codes as NonReplicated (the
/// way the SDK does for codes without an operation), and anything else uses
/// the raw selector byte as the operation and the raw u16 as the code.
fn header(prefix: [u8; 4], body_len: usize) -> RequestHeader {
    let [selector, code_lo, code_hi, flags] = prefix;
    let raw_code = u32::from(u16::from_le_bytes([code_lo, code_hi]));
    let operations = Operation::ALL.len();
    let codes = CommandCode::ALL.len();
    let selector = usize::from(selector);
    let (operation, command_code) = if selector < operations {
        (Operation::ALL[selector] as u8, raw_code)
    } else if selector < operations + codes {
        let code = CommandCode::ALL[selector - operations];
        (Operation::NonReplicated as u8, code as u32)
    } else {
        (selector as u8, raw_code)
    };
    RequestHeader {
        request: u64::from(flags & 1),
        session: u64::from((flags >> 1) & 1),
        ..RequestHeader::client_request(operation, command_code, body_len)
    }
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.split_first_chunk::<HEADER_SIZE>() {
        Some((frame_header, body)) if frame_header[60] == 5 => {
            (RequestHeader::decode(frame_header), body)
        }
        _ => {
            let Some((prefix, body)) = data.split_first_chunk::<4>() else {
                return;
            };
            (header(*prefix, body.len()), body)
        }
    };
    match Command::decode(&header, body) {
        Ok(command) => {
            assert_eq!(command.operation() as u8, header.operation);
            if !matches!(
                command,
                Command::Register(_) | Command::ClusterRouting { .. }
            ) {
                let reencoded = request_of::request_of(&command).body;
                assert_eq!(
                    Command::decode(&header, &reencoded).as_ref(),
                    Ok(&command),
                    "re-encoded body {reencoded:?}"
                );
            }
        }
        Err(error) => {
            let _ = (error.action(), error.status(), error.to_string());
        }
    }
});
