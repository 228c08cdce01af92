#![recursion_limit = "256"]
//! gatewayd: a Discord Gateway v10 compatible node. `gatewayd run` (the
//! default) serves bots; `gatewayd registry ...` manages the registry.

// The node's modules live in the library (src/lib.rs; declare new ones
// there); the binary is the CLI around them.
use gatewayd::{config, node, registry_cli};
// no_alloc's test names them as `crate::...`.
#[cfg(test)]
use gatewayd::{delivery, protocol, worker};
#[cfg(test)]
mod no_alloc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "gatewayd",
    // The commit from build.rs ("unknown" outside a git checkout).
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("GATEWAYD_COMMIT"), ")"),
    about = "Discord Gateway v10 compatible node on thread-per-core io_uring workers"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: config::RunArgs,
}

// `Run` holds every flag; the command is parsed once at start, so its size
// does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the node (the default). A flag given twice: the last one wins.
    #[command(args_override_self = true)]
    Run(config::RunArgs),
    /// Manage applications, servers and installations in the registry.
    Registry(registry_cli::RegistryArgs),
    /// The egress: makes outbound calls to bot-supplied URLs for a node
    /// (started by the node itself unless `egress.remote` names one).
    Egress(gatewayd::egress::server::EgressArgs),
    /// A live one-screen view of a running node, read from its admin /metrics.
    Stats(gatewayd::ops::stats::StatsArgs),
    /// Use a bot's slash command (or click its button) as a person would,
    /// and print what the person sees.
    Interact(gatewayd::interact_cli::InteractArgs),
    /// Make the cluster link's certificates: a cluster CA, and a node's
    /// certificate for its advertised IP (docs/cluster.md).
    Cert(gatewayd::cert_cli::CertArgs),
}

/// `gatewayd run`: its exit status says how it ended (node/notify.rs).
fn run(args: &config::RunArgs) -> ! {
    use node::notify::{EXIT_CONFIG, EXIT_FAILED};
    if args.check {
        std::process::exit(node::check::run(args));
    }
    let cfg = match config::Config::load(args) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("gatewayd: configuration: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    match node::run(cfg) {
        Ok(stopped) => std::process::exit(stopped.code()),
        Err(e) => {
            eprintln!("gatewayd: {e}");
            std::process::exit(EXIT_FAILED);
        }
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Registry(args)) => {
            // The CLI dies quietly on a closed stdout (`gatewayd registry list | head`)
            // like other tools, instead of panicking in println!. Only the CLI:
            // the node writes to sockets and must never die of SIGPIPE.
            // SAFETY: restoring the default disposition of one signal at start.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            registry_cli::run(args)
        }
        Some(Command::Egress(args)) => gatewayd::egress::server::run(args),
        Some(Command::Stats(args)) => gatewayd::ops::stats::run(args),
        Some(Command::Cert(args)) => gatewayd::cert_cli::run(args),
        Some(Command::Interact(args)) => match gatewayd::interact_cli::run(args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Some(Command::Run(args)) => run(&args),
        None => run(&cli.run),
    };
    if let Err(e) = result {
        eprintln!("gatewayd: {e}");
        std::process::exit(1);
    }
}
