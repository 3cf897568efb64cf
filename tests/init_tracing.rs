//! `config::init_tracing` installs the process-wide subscriber, so it is tested in its own
//! test binary (one process) rather than among the library's unit tests.

use consul_elector::cli::{LogFormat, TracingError, init_tracing};

#[test]
fn installs_the_json_subscriber_once() {
    assert!(matches!(
        init_tracing(LogFormat::Json, "not a level=?"),
        Err(TracingError::Filter(_))
    ));
    init_tracing(LogFormat::Json, "off").expect("the first subscriber installs");
    tracing::info!("filtered out");
    assert!(matches!(
        init_tracing(LogFormat::Plain, "info"),
        Err(TracingError::Install(_))
    ));
}
