//! Drawing the screen from the [`App`]'s state.

use super::app::{masked, session_choice, App, Field, Mode, EXTENSIONS};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use serde_json::Value;

/// The smallest terminal the screen is drawn in.
pub const MIN_W: u16 = 60;
pub const MIN_H: u16 = 16;

pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    if area.width < MIN_W || area.height < MIN_H {
        let text = format!(
            "The terminal is too small ({}×{}): albedo-mcp ui needs at least {MIN_W}×{MIN_H}. \
             Make it larger, or press q to quit.",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let [title, body, details, msg, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(4),
        Constraint::Length(7),
        Constraint::Length(2),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(
        Line::from(vec![
            Span::styled(" albedo-mcp · MCP servers ", Style::new().bold().reversed()),
            Span::raw(format!(" daemon {}", app.daemon)),
        ]),
        title,
    );
    draw_list(f, app, body);
    draw_details(f, app, details);
    let mut lines = Vec::new();
    if let Some(u) = &app.unreachable {
        lines.push(Line::styled(
            format!("{u} (trying again every few seconds)"),
            Style::new().fg(Color::Red).bold(),
        ));
    }
    if let Some(b) = &app.busy {
        lines.push(Line::styled(
            format!("{b}..."),
            Style::new().fg(Color::Yellow),
        ));
    }
    if let Some((m, err)) = &app.message {
        let style = if *err {
            Style::new().fg(Color::Red)
        } else {
            Style::new().fg(Color::Green)
        };
        lines.push(Line::styled(m.clone(), style));
    }
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), msg);
    let keys = match &app.mode {
        Mode::List => {
            "↑↓ move  n new  ⏎ edit  d del  e enable  ^L sign in  ^U sign out  x ext  q quit"
        }
        Mode::Form(_) => {
            "tab/↑↓ field  ←→ transport  ^S save (enter on last field)  ^L sign in  esc close"
        }
        Mode::ConfirmDelete(_) => "y delete  n keep",
        Mode::Login(_) => "paste the callback URL, enter sends it  esc cancel",
        Mode::Extensions { .. } => {
            "↑↓ extension  enter switch it in the scope shown  s scope  r refresh  esc back"
        }
    };
    f.render_widget(
        Paragraph::new(Line::styled(keys, Style::new().reversed())),
        footer,
    );
    match &app.mode {
        Mode::Form(_) => draw_form(f, app, area),
        Mode::ConfirmDelete(name) => {
            let r = centered(area, 56, 5);
            f.render_widget(Clear, r);
            f.render_widget(
                Paragraph::new(format!("Delete {name} and its stored credentials? (y/n)"))
                    .wrap(Wrap { trim: true })
                    .block(Block::bordered().title(" delete ")),
                r,
            );
        }
        Mode::Login(_) => draw_login(f, app, area),
        Mode::Extensions { session_scope } => draw_extensions(f, app, area, *session_scope),
        Mode::List => {}
    }
}

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

/// A server's state in a few words, with its reason.
pub fn state_text(s: &Value) -> String {
    if let Some(p) = s["problem"].as_str() {
        return format!("invalid: {p}");
    }
    let st = &s["status"];
    let state = st["state"].as_str().unwrap_or("?");
    let mut t = match state {
        "disabled" => "switched off".to_owned(),
        "needs_sign_in" => "needs sign-in".to_owned(),
        other => other.replace('_', " "),
    };
    if let Some(e) = st["last_error"].as_str().or(st["problem"].as_str()) {
        if state != "connected" {
            t.push_str(&format!(": {e}"));
        }
    }
    t
}

/// The sign-in in a few words.
pub fn auth_text(s: &Value) -> String {
    let a = &s["auth"];
    match a["state"].as_str() {
        None | Some("none") => "-".to_owned(),
        Some("signed_in") => {
            let mut t = "signed in".to_owned();
            if let Some(who) = a["account"].as_str() {
                t.push_str(&format!(" as {who}"));
            }
            if let Some(until) = a["expires_at"].as_str() {
                t.push_str(&format!(" until {until}"));
            } else if let Some(until) = a["expires_at"].as_u64() {
                t.push_str(&format!(" until {until}"));
            }
            t
        }
        Some(other) => {
            let mut t = other.replace('_', " ");
            if let Some(r) = a["reason"].as_str() {
                t.push_str(&format!(": {r}"));
            }
            t
        }
    }
}

fn era_text(s: &Value) -> String {
    let st = &s["status"];
    match (st["era"].as_str(), st["protocol_version"].as_str()) {
        (Some(e), Some(p)) => format!("{e} {p}"),
        (None, Some(p)) => p.to_owned(),
        (Some(e), None) => e.to_owned(),
        _ => "-".to_owned(),
    }
}

fn draw_list(f: &mut Frame, app: &App, area: Rect) {
    let block = Block::bordered().title(" servers ");
    let Some(_) = &app.settings else {
        let text = if app.unreachable.is_some() {
            "No daemon answers: start it with  albedo-mcp serve"
        } else {
            "Asking the daemon..."
        };
        f.render_widget(Paragraph::new(text).block(block), area);
        return;
    };
    let servers = app.servers();
    if servers.is_empty() {
        f.render_widget(
            Paragraph::new("No servers configured: press n to add one.").block(block),
            area,
        );
        return;
    }
    let rows: Vec<Row> = servers
        .iter()
        .map(|(name, s)| {
            let state = state_text(s);
            let color = match s["status"]["state"].as_str() {
                Some("connected") => Color::Green,
                Some("failed") | Some("unavailable") | Some("invalid") => Color::Red,
                Some("needs_sign_in") => Color::Yellow,
                _ if s.get("problem").is_some() => Color::Red,
                _ => Color::Reset,
            };
            Row::new(vec![
                Cell::from(name.clone()),
                Cell::from(s["type"].as_str().unwrap_or("?").to_owned()),
                Cell::from(state).style(Style::new().fg(color)),
                Cell::from(era_text(s)),
                Cell::from(
                    s["status"]["tools"]
                        .as_u64()
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "-".into()),
                ),
                Cell::from(auth_text(s)),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(16),
            Constraint::Length(5),
            Constraint::Fill(2),
            Constraint::Length(17),
            Constraint::Length(5),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new(vec![
            "NAME",
            "TYPE",
            "STATE",
            "ERA/PROTOCOL",
            "TOOLS",
            "SIGN-IN",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .row_highlight_style(Style::new().reversed())
    .highlight_symbol("› ")
    .block(block);
    let mut st = TableState::default().with_selected(Some(app.selected));
    f.render_stateful_widget(table, area, &mut st);
}

fn draw_details(f: &mut Frame, app: &App, area: Rect) {
    let block = Block::bordered().title(" selected ");
    let Some((name, s)) = app.selected_server() else {
        let problems: Vec<Line> = app
            .settings
            .as_ref()
            .and_then(|v| v["problems"].as_array())
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|p| Line::from(format!("problem: {p}")))
            .collect();
        f.render_widget(
            Paragraph::new(problems)
                .wrap(Wrap { trim: true })
                .block(block),
            area,
        );
        return;
    };
    let target = crate::cli::mcp::render::target(&s);
    let mut lines = vec![
        Line::from(vec![
            Span::raw(name).bold(),
            Span::raw(format!("  {target}")),
        ]),
        Line::from(format!("state: {}", state_text(&s))),
        Line::from(format!("sign-in: {}", auth_text(&s))),
    ];
    let sec = &s["secrets"];
    let mut set = Vec::new();
    if sec["bearer_token"] == true {
        set.push("bearer token".to_owned());
    }
    if let Some(h) = sec["header"].as_str() {
        set.push(format!("header {h}"));
    }
    for e in sec["env"].as_array().into_iter().flatten() {
        set.push(format!("env {}", e.as_str().unwrap_or("")));
    }
    if !set.is_empty() {
        lines.push(Line::from(format!("secrets set: {}", set.join(", "))));
    }
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(block),
        area,
    );
}

fn draw_form(f: &mut Frame, app: &App, area: Rect) {
    let Mode::Form(form) = &app.mode else { return };
    let title = match &form.editing {
        Some(n) if !form.needs_sign_in => format!(" edit {n} "),
        Some(n) => format!(" {n} (saved) "),
        None => " new server ".to_owned(),
    };
    let mut lines = Vec::new();
    for (i, field) in form.fields().into_iter().enumerate() {
        let focused = i == form.focus;
        let label = format!("{:>14}: ", field.label(form.http));
        let value = form.value(field);
        let shown = match field {
            Field::Transport => {
                if form.http {
                    "[http]  stdio ".to_owned()
                } else {
                    " http  [stdio]".to_owned()
                }
            }
            Field::Name if form.editing.is_some() => value,
            Field::Name if !form.name_edited && !value.is_empty() => {
                format!("{value}  (suggested)")
            }
            Field::Name if !form.name_edited && form.suggest_error.is_some() => {
                "(none suggested: see below)".to_owned()
            }
            f if f.secret() => masked(f, &value),
            _ => value,
        };
        let mut spans = vec![Span::raw(label)];
        let style = if focused {
            Style::new().reversed()
        } else {
            Style::new()
        };
        spans.push(Span::styled(shown, style));
        if focused && field != Field::Transport {
            spans.push(Span::styled("▏", Style::new().fg(Color::Cyan)));
        }
        lines.push(Line::from(spans));
    }
    lines.push(Line::from(""));
    if form.editing.is_some() && !form.needs_sign_in {
        lines.push(Line::from(
            "secrets: blank keeps the stored one, - removes it".dim(),
        ));
    }
    if let (Some(why), false) = (&form.suggest_error, form.name_edited) {
        lines.push(Line::styled(
            format!("no name suggested: {why}"),
            Style::new().fg(Color::Yellow),
        ));
    }
    if form.saving {
        lines.push(Line::styled(
            "saving: the daemon starts the server first...",
            Style::new().fg(Color::Yellow),
        ));
    }
    if form.needs_sign_in {
        lines.push(Line::styled(
            "Saved. The server asks for a sign-in: ctrl+l signs in, esc closes.",
            Style::new().fg(Color::Yellow),
        ));
    }
    if let Some(e) = &form.error {
        lines.push(Line::styled(
            format!("error: {e}"),
            Style::new().fg(Color::Red).bold(),
        ));
    }
    let w = area.width.saturating_sub(4).min(90);
    let inner = usize::from(w.saturating_sub(2)).max(1);
    let h: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let para = Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(Block::bordered().title(title));
    let r = centered(area, w, (h as u16 + 4).max(8));
    f.render_widget(Clear, r);
    f.render_widget(para, r);
}

fn draw_extensions(f: &mut Frame, app: &App, area: Rect, session_scope: bool) {
    let r = centered(area, area.width.saturating_sub(4).min(90), 12);
    f.render_widget(Clear, r);
    let onoff = |v: Option<bool>| match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    };
    let mut lines = vec![];
    lines.push(match (&app.session, session_scope) {
        (Some(id), true) if app.picked => Line::styled(
            format!("enter changes: session {id} only (s: the next live session)"),
            Style::new().bold(),
        ),
        (Some(id), true) => Line::styled(
            format!("enter changes: session {id} only (s: every session)"),
            Style::new().bold(),
        ),
        (Some(_), false) => Line::styled(
            "enter changes: the default for every session (s: this session only)",
            Style::new().bold(),
        ),
        (None, _) => Line::styled(
            "enter changes: the default for every session (s: pick a live session)",
            Style::new().bold(),
        ),
    });
    lines.push(Line::from(""));
    for (row, ext) in EXTENSIONS.iter().enumerate() {
        let every = app.extensions.as_ref().map(|v| v[*ext]["enabled"] == true);
        let cursor = if row == app.ext_row { "›" } else { " " };
        let mut line = format!("{cursor} {ext:<12} every session: {}", onoff(every));
        if let Some(id) = &app.session {
            let this = app.session_view.as_ref().map(|v| session_choice(v, ext));
            line.push_str(&format!("   session {id}: {}", onoff(this)));
        }
        lines.push(if row == app.ext_row {
            Line::styled(line, Style::new().bold())
        } else {
            Line::from(line)
        });
    }
    lines.push(Line::from(""));
    lines.push(Line::from(
        "  mcp: the servers you configured.  editor-mcp: the servers an editor supplies (ACP)."
            .dim(),
    ));
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" extensions ")),
        r,
    );
}

fn draw_login(f: &mut Frame, app: &App, area: Rect) {
    let Mode::Login(l) = &app.mode else { return };
    let mut lines = vec![Line::from(format!("state: {}", l.state.replace('_', " ")))];
    if let Some(u) = &l.url {
        lines.push(Line::from("Open this address to sign in:"));
        lines.push(Line::styled(u.clone(), Style::new().fg(Color::Cyan)));
        if let Some(b) = &l.browser {
            lines.push(Line::from(b.clone()));
        }
        lines.push(Line::from(format!(
            "Or paste the address the browser ends on ({}...):",
            l.redirect_uri.as_deref().unwrap_or("the redirect URI")
        )));
        lines.push(Line::from(vec![
            Span::raw("> "),
            Span::styled(l.paste.clone(), Style::new().reversed()),
            Span::styled("▏", Style::new().fg(Color::Cyan)),
        ]));
    }
    if let Some(m) = &l.message {
        lines.push(Line::styled(m.clone(), Style::new().fg(Color::Red)));
    }
    if l.done {
        lines.push(Line::from("esc closes"));
    }
    let w = area.width.saturating_sub(2);
    let inner = usize::from(w.saturating_sub(2)).max(1);
    let h: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let r = centered(area, w, (h as u16 + 4).max(8));
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(format!(" sign in to {} ", l.name))),
        r,
    );
}
