//! The `iggyd` binary: parse arguments, hand them to `boot`, turn the outcome
//! into an exit code. Nothing else lives here.

fn main() -> std::process::ExitCode {
    iggyd::boot::main()
}
