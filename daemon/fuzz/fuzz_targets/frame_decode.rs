//! Fuzz target `frame_decode`: arbitrary bytes as a connection's receive
//! buffer. Frames are taken off the front with `decode_frame` exactly as the
//! connection does, each is decoded with `Frame::command`, and every decode
//! error is turned into the bytes the server would send (`encode_error`).
//!
//! Properties: nothing panics; `frame_len` and `decode_frame` agree; a frame
//! never claims more bytes than were given or fewer than a header; an error
//! reply or eviction is exactly one 256-byte header whose `size` is 256; an
//! accepted command travels with the operation byte it was decoded from.

#![no_main]

use iggyd_wire::protocol::limits::HEADER_SIZE;
use iggyd_wire::protocol::reply::encode_error;
use iggyd_wire::protocol::{WireAction, decode_frame, frame_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        let announced = frame_len(rest);
        match decode_frame(rest) {
            Ok(Some((frame, used))) => {
                assert_eq!(announced, Ok(Some(used)));
                assert!((HEADER_SIZE..=rest.len()).contains(&used));
                assert_eq!(frame.body.len(), used - HEADER_SIZE);
                match frame.command() {
                    Ok(command) => {
                        let _ = command.code();
                        if !matches!(command, iggyd_wire::protocol::Command::Register(_)) {
                            assert_eq!(command.operation() as u8, frame.header.operation);
                        }
                    }
                    Err(error) => {
                        let _ = error.to_string();
                        match encode_error(&frame.header, &error, 7, 9) {
                            Some(reply) => {
                                assert_ne!(error.action(), WireAction::Close);
                                assert_eq!(reply.len(), HEADER_SIZE);
                                assert_eq!(&reply[48..52], &256u32.to_le_bytes());
                            }
                            None => assert_eq!(error.action(), WireAction::Close),
                        }
                    }
                }
                rest = &rest[used..];
            }
            Ok(None) => {
                match announced {
                    Ok(Some(length)) => assert!(length > rest.len()),
                    Ok(None) => assert!(rest.len() < 52),
                    Err(error) => panic!("frame_len failed ({error}) but decode_frame waits"),
                }
                break;
            }
            Err(error) => {
                assert_eq!(error.action(), WireAction::Close);
                break;
            }
        }
    }
});
