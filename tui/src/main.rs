//! The `iggy-top` binary: parses the command line, then either prints one
//! snapshot line (`--once --json`, plus the history line with `--history`)
//! or runs the dashboard: it puts the
//! terminal in raw mode on the alternate screen (restored on exit and by a
//! panic hook), starts the input and socket threads, and runs the event
//! loop. The loop blocks on one channel and redraws only when an event
//! changes what is shown, so an idle console costs almost no CPU; actions
//! the operator confirmed go out on threads of their own.

use clap::Parser;
use crossterm::event::{self as terminal_event, KeyEventKind};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use iggy_top::api;
use iggy_top::app::{Action, App};
use iggy_top::client::{self, ClientConfig};
use iggy_top::event::Event;
use iggy_top::theme::Theme;
use iggy_top::ui;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use std::io::{self, Stdout};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

/// Where the packaged daemon puts its admin socket.
const PACKAGED_SOCKET: &str = "/run/iggyd/iggyd.sock";
/// Where a daemon run from a checkout with its defaults puts it.
const LOCAL_SOCKET: &str = "local_data/iggyd.sock";
/// How long the loop waits for an event before a `Tick`.
const TICK: Duration = Duration::from_secs(1);
/// How long `--once` and an action wait for the daemon.
const ONCE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a snapshot ZIP may take: the daemon's own wait for it, plus
/// the time to write it.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_millis(api::SNAPSHOT_FILE_WAIT_MS_MAX + 15_000);
/// Subscription interval bounds the daemon accepts.
const INTERVAL_MIN: Duration = Duration::from_millis(100);
const INTERVAL_MAX: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
#[command(name = "iggy-top", version, about = "Live console for iggyd")]
struct Cli {
    /// Admin socket of the daemon [default: /run/iggyd/iggyd.sock if it
    /// exists, else ./local_data/iggyd.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Refresh interval (100ms to 60s), e.g. 500ms, 2s.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
    /// Print one snapshot and exit (requires --json).
    #[arg(long, requires = "json")]
    once: bool,
    /// With --once: print the snapshot as the daemon's JSON line.
    #[arg(long, requires = "once")]
    json: bool,
    /// With --once --json: also print the daemon's history (15 min of
    /// one-second points, 6 h of ten-second points) as a second line.
    #[arg(long, requires = "once")]
    history: bool,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if (INTERVAL_MIN..=INTERVAL_MAX).contains(&interval) {
        Ok(interval)
    } else {
        Err(format!("{text} is out of range: use 100ms to 60s"))
    }
}

fn default_socket() -> PathBuf {
    let packaged = PathBuf::from(PACKAGED_SOCKET);
    if packaged.exists() {
        packaged
    } else {
        PathBuf::from(LOCAL_SOCKET)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let socket = cli.socket.unwrap_or_else(default_socket);
    if cli.once {
        let lines = client::fetch_snapshot_line(&socket, ONCE_TIMEOUT).and_then(|snapshot| {
            if cli.history {
                client::fetch_history_line(&socket, ONCE_TIMEOUT)
                    .map(|history| format!("{snapshot}\n{history}"))
            } else {
                Ok(snapshot)
            }
        });
        return match lines {
            Ok(lines) => {
                println!("{lines}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("iggy-top: {}: {message}", socket.display());
                ExitCode::FAILURE
            }
        };
    }
    match run_dashboard(socket, cli.interval) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("iggy-top: {error}");
            ExitCode::FAILURE
        }
    }
}

type Term = Terminal<CrosstermBackend<Stdout>>;

/// Raw mode and the alternate screen, with a panic hook that puts the
/// terminal back before the panic message prints.
fn init_terminal() -> io::Result<Term> {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        default_hook(info);
    }));
    enable_raw_mode()?;
    if let Err(error) = execute!(io::stdout(), EnterAlternateScreen) {
        restore_terminal();
        return Err(error);
    }
    Terminal::new(CrosstermBackend::new(io::stdout())).inspect_err(|_| restore_terminal())
}

fn restore_terminal() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, crossterm::cursor::Show);
}

fn run_dashboard(socket: PathBuf, interval: Duration) -> io::Result<()> {
    let (events, receiver) = mpsc::channel();
    client::spawn(
        ClientConfig {
            socket: socket.clone(),
            interval,
        },
        events.clone(),
    )?;
    let mut terminal = init_terminal()?;
    // Input: crossterm's read blocks until the terminal has something.
    let events_for_actions = events.clone();
    let input = events;
    std::thread::Builder::new()
        .name("iggy-top-input".into())
        .spawn(move || {
            loop {
                let event = match terminal_event::read() {
                    Ok(terminal_event::Event::Key(key)) if key.kind != KeyEventKind::Release => {
                        Event::Key(key)
                    }
                    Ok(terminal_event::Event::Resize(width, height)) => {
                        Event::Resize { width, height }
                    }
                    Ok(_) => continue,
                    Err(_) => return,
                };
                if input.send(event).is_err() {
                    return;
                }
            }
        })?;
    let mut app = App::new(socket, interval);
    app.theme = Theme::detect(
        std::env::var("NO_COLOR").ok().as_deref(),
        std::env::var("TERM").ok().as_deref(),
        std::env::var("COLORTERM").ok().as_deref(),
    );
    let result = event_loop(&mut terminal, &receiver, &events_for_actions, &mut app);
    restore_terminal();
    result
}

/// Send a confirmed action on a connection of its own, off the UI thread;
/// its answer comes back as `Event::ActionDone`.
fn send_action(socket: PathBuf, action: Action, events: mpsc::Sender<Event>) {
    let (line, timeout) = match &action {
        Action::SetLogLevel(level) => (api::set_log_level_request(level), ONCE_TIMEOUT),
        Action::DisconnectClient { client_id, .. } => {
            (api::disconnect_client_request(*client_id), ONCE_TIMEOUT)
        }
        Action::SnapshotFile { path } => (
            api::snapshot_file_request(path, api::SNAPSHOT_FILE_COMPRESSION_DEFAULT, &["all"]),
            SNAPSHOT_TIMEOUT,
        ),
    };
    let spawned = std::thread::Builder::new()
        .name("iggy-top-action".into())
        .spawn(move || {
            let result = client::send_action(&socket, &line, timeout);
            let _ = events.send(Event::ActionDone(result));
        });
    if let Err(error) = spawned {
        eprintln!("iggy-top: cannot start a thread for the action: {error}");
    }
}

/// Ask for `cluster_status` off the UI thread (the daemon probes the
/// other nodes, which can take a moment); the answer comes back as
/// `Event::Cluster`.
fn fetch_cluster(socket: PathBuf, events: mpsc::Sender<Event>) {
    let sender = events.clone();
    let spawned = std::thread::Builder::new()
        .name("iggy-top-cluster".into())
        .spawn(move || {
            let answer = client::fetch_cluster_status(&socket, ONCE_TIMEOUT);
            let _ = sender.send(Event::Cluster(answer));
        });
    if let Err(error) = spawned {
        let reason = format!("cannot start a thread for the cluster view: {error}");
        let _ = events.send(Event::Cluster(Err(reason)));
    }
}

fn event_loop(
    terminal: &mut Term,
    receiver: &mpsc::Receiver<Event>,
    events: &mpsc::Sender<Event>,
    app: &mut App,
) -> io::Result<()> {
    terminal.draw(|frame| ui::render(frame, app))?;
    loop {
        let first = match receiver.recv_timeout(TICK) {
            Ok(event) => event,
            Err(mpsc::RecvTimeoutError::Timeout) => Event::Tick,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let mut redraw = app.needs_redraw(&first);
        app.update(first);
        // Take everything already queued before drawing once.
        while let Ok(event) = receiver.try_recv() {
            redraw |= app.needs_redraw(&event);
            app.update(event);
        }
        if app.should_quit {
            return Ok(());
        }
        if let Some(action) = app.take_action() {
            send_action(app.socket.clone(), action, events.clone());
        }
        if app.take_cluster_request() {
            fetch_cluster(app.socket.clone(), events.clone());
        }
        if redraw {
            terminal.draw(|frame| ui::render(frame, app))?;
        }
    }
}
