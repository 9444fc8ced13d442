//! Colours: one `Theme` of named styles that every render function takes
//! its colours from, in three depths: no colour at all (`NO_COLOR`, or a
//! dumb terminal: bold and reverse only), the 16 ANSI colours (what every
//! terminal, ssh session and tmux pane shows), and 256/true colour (finer
//! shades for meters and graphs). It reads the environment once, in
//! `Theme::detect`; rendering never does.

use ratatui::style::{Color, Modifier, Style};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// `NO_COLOR` is set (any value), or `TERM=dumb`.
    Mono,
    /// The 16 ANSI colours.
    Ansi16,
    /// `COLORTERM=truecolor|24bit` or a `TERM` ending in `256color`.
    Rgb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub depth: Depth,
}

impl Default for Theme {
    fn default() -> Theme {
        Theme {
            depth: Depth::Ansi16,
        }
    }
}

impl Theme {
    /// The depth the environment asks for.
    pub fn detect(no_color: Option<&str>, term: Option<&str>, colorterm: Option<&str>) -> Theme {
        let depth = if no_color.is_some() || term == Some("dumb") {
            Depth::Mono
        } else if matches!(colorterm, Some("truecolor" | "24bit"))
            || term.is_some_and(|term| term.ends_with("256color"))
        {
            Depth::Rgb
        } else {
            Depth::Ansi16
        };
        Theme { depth }
    }

    fn pick(&self, ansi: Color, rgb: Color) -> Style {
        match self.depth {
            Depth::Mono => Style::new(),
            Depth::Ansi16 => Style::new().fg(ansi),
            Depth::Rgb => Style::new().fg(rgb),
        }
    }

    /// Titles and the product name.
    pub fn accent(&self) -> Style {
        self.pick(Color::Cyan, Color::Rgb(95, 215, 255))
            .add_modifier(Modifier::BOLD)
    }
    /// Labels and other quiet text.
    pub fn dim(&self) -> Style {
        match self.depth {
            Depth::Mono => Style::new(),
            _ => self.pick(Color::DarkGray, Color::Rgb(128, 128, 128)),
        }
    }
    pub fn value(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub fn good(&self) -> Style {
        self.pick(Color::Green, Color::Rgb(95, 215, 95))
    }
    pub fn warn(&self) -> Style {
        self.pick(Color::Yellow, Color::Rgb(255, 215, 0))
            .add_modifier(Modifier::BOLD)
    }
    /// Alerts; in mono, reversed so they still stand out.
    pub fn bad(&self) -> Style {
        match self.depth {
            Depth::Mono => Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD),
            _ => self
                .pick(Color::Red, Color::Rgb(255, 95, 95))
                .add_modifier(Modifier::BOLD),
        }
    }
    /// A banner across the screen (disconnected, confirmations).
    pub fn banner(&self) -> Style {
        match self.depth {
            Depth::Mono => Style::new().add_modifier(Modifier::REVERSED),
            _ => Style::new().fg(Color::White).bg(Color::Red),
        }
    }
    /// The selected row, tab or key.
    pub fn selected(&self) -> Style {
        match self.depth {
            Depth::Mono => Style::new().add_modifier(Modifier::REVERSED),
            _ => Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD),
        }
    }
    pub fn key(&self) -> Style {
        match self.depth {
            Depth::Mono => Style::new().add_modifier(Modifier::REVERSED),
            _ => Style::new().fg(Color::Black).bg(Color::Gray),
        }
    }
    /// Graph lines: what comes in, what goes out, and a third series.
    pub fn series_in(&self) -> Style {
        self.pick(Color::Green, Color::Rgb(135, 215, 95))
    }
    pub fn series_out(&self) -> Style {
        self.pick(Color::Magenta, Color::Rgb(215, 135, 255))
    }
    pub fn series_third(&self) -> Style {
        self.pick(Color::Yellow, Color::Rgb(255, 175, 95))
    }
    pub fn border(&self) -> Style {
        self.dim()
    }
    /// A meter's filled part at `percent` (0-100): green, yellow, red.
    pub fn meter(&self, percent: f64) -> Style {
        match self.depth {
            Depth::Mono => Style::new().add_modifier(Modifier::BOLD),
            Depth::Ansi16 => Style::new().fg(if percent >= 85.0 {
                Color::Red
            } else if percent >= 60.0 {
                Color::Yellow
            } else {
                Color::Green
            }),
            Depth::Rgb => {
                // A smooth green -> yellow -> red ramp.
                let share = (percent.clamp(0.0, 100.0) / 100.0) as f32;
                let red = (95.0 + 160.0 * (share * 2.0).min(1.0)) as u8;
                let green = (215.0 - 120.0 * ((share - 0.5).max(0.0) * 2.0)) as u8;
                Style::new().fg(Color::Rgb(red, green, 95))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the environment picks the depth: NO_COLOR wins over anything,
    /// true colour and 256-colour terminals get RGB, the rest 16 colours;
    /// and mono styles carry no colour at all.
    #[test]
    fn depth_follows_the_environment() {
        let detect = |no_color, term, colorterm| Theme::detect(no_color, term, colorterm).depth;
        assert_eq!(
            detect(Some(""), Some("xterm-256color"), Some("truecolor")),
            Depth::Mono
        );
        assert_eq!(detect(None, Some("dumb"), None), Depth::Mono);
        assert_eq!(detect(None, Some("screen"), Some("24bit")), Depth::Rgb);
        assert_eq!(detect(None, Some("tmux-256color"), None), Depth::Rgb);
        assert_eq!(detect(None, Some("xterm"), None), Depth::Ansi16);
        assert_eq!(detect(None, None, None), Depth::Ansi16);
        let mono = Theme { depth: Depth::Mono };
        for style in [mono.bad(), mono.good(), mono.meter(99.0), mono.series_in()] {
            assert_eq!((style.fg, style.bg), (None, None));
        }
        let ansi = Theme::default();
        assert_eq!(ansi.meter(90.0).fg, Some(Color::Red));
        assert_eq!(ansi.meter(10.0).fg, Some(Color::Green));
    }
}
