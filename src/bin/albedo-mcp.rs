//! The `albedo-mcp` command.

use albedo_mcp::cli::{Cli, Command};
use clap::Parser;

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Launch { command, args } => albedo_mcp::transport::launcher::run(&command, &args),
        Command::Serve { listen, ready_file } => {
            match albedo_mcp::cli::serve::run(listen, ready_file) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("albedo-mcp: {e}");
                    let mut src = std::error::Error::source(&e);
                    while let Some(s) = src {
                        eprintln!("  caused by: {s}");
                        src = s.source();
                    }
                    1
                }
            }
        }
        Command::Status { daemon } => albedo_mcp::cli::client::status(daemon.as_deref()),
        Command::Tools { daemon } => albedo_mcp::cli::client::tools(daemon.as_deref()),
        Command::Token {
            rotate,
            path,
            daemon,
        } => albedo_mcp::cli::client::token(daemon.as_deref(), rotate, path),
        Command::Web { daemon } => albedo_mcp::cli::client::web(daemon.as_deref()),
        Command::Ui { daemon, session } => {
            albedo_mcp::tui::run(daemon.as_deref(), session.as_deref())
        }
        Command::Acp { daemon } => albedo_mcp::cli::acp::run(daemon.as_deref()),
        Command::Mcp(args) => albedo_mcp::cli::mcp::run(*args),
        Command::ConformanceClient { url } => albedo_mcp::cli::conformance::run(&url),
    };
    std::process::exit(code);
}
