//! The command line: `serve` runs the daemon; `launch` is the stdio launcher (internal);
//! `conformance-client` talks to one server directly; the other commands are clients of a
//! running daemon's HTTP API and never write its files.

pub mod client;
pub mod conformance;
pub mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "albedo-mcp",
    version,
    about = "Connects agent sessions to MCP servers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the daemon.
    Serve {
        /// Listen address (overrides config.toml and ALBEDO_LISTEN).
        #[arg(long)]
        listen: Option<String>,
        /// Write the bound address to this file once listening (for scripts and tests).
        #[arg(long)]
        ready_file: Option<std::path::PathBuf>,
    },
    /// Internal: run one stdio server in its own process group (used by the daemon).
    #[command(hide = true)]
    Launch {
        command: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Ask a running daemon for its health.
    Status {
        #[arg(long, default_value = "http://127.0.0.1:7420")]
        daemon: String,
    },
    /// Create a session on a running daemon and list its tools.
    Tools {
        #[arg(long, default_value = "http://127.0.0.1:7420")]
        daemon: String,
    },
    /// Talk to one HTTP MCP server as the conformance runner's client: do the work of the
    /// scenario named in MCP_CONFORMANCE_SCENARIO and exit (0 when it all worked).
    ConformanceClient {
        /// The server's URL (the runner passes it last).
        url: String,
    },
}
