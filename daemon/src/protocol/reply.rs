//! Reply encoders (filled in by the next commit).
