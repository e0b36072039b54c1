//! `placement-oracle`: config → telemetry → metrics → store → serve. Everything else is in the library.

#![forbid(unsafe_code)]

use clap::Parser;
use placement_oracle::config::{Cli, Command};
use placement_oracle::{open_store, serve, shutdown_signal, telemetry};

/// mimalloc instead of the system allocator: a request allocates and frees many small buffers
/// (the body, its checked JSON, the store's rows, the answer), and glibc's malloc took about a
/// sixth of the service's CPU on a heartbeat (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve);
    if command == Command::Openapi {
        let spec = serde_json::to_string_pretty(placement_oracle::http::openapi())? + "\n";
        // A reader that stops early (`| head`) closes the pipe: that is no error of ours.
        return match std::io::Write::write_all(&mut std::io::stdout(), spec.as_bytes()) {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
            _ => Ok(()),
        };
    }

    let mut config = cli.config;
    telemetry::init_logging(config.log_format);
    if let Err(problem) = config.load_secrets() {
        anyhow::bail!("invalid configuration: {problem}");
    }
    if let Err(problems) = config.validate() {
        for problem in &problems {
            tracing::error!("invalid configuration: {problem}");
        }
        anyhow::bail!("invalid configuration: {}", problems.join("; "));
    }
    tracing::debug!(?config, "configuration");

    if command == Command::Migrate {
        placement_oracle::migrate(&config).await?;
        tracing::info!("migrations applied");
        return Ok(());
    }

    telemetry::metrics_handle();
    let store = open_store(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    serve(config, store, listener, shutdown_signal()).await
}
