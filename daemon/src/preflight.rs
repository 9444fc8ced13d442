//! preflight
