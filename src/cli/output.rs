//! Writing data to stdout: one JSON document per line, or a plain text table.

use std::io::Write;

use serde::Serialize;

use super::error::{CliError, CliResult};

/// Writes `value` as one JSON line on stdout and flushes it (scripts read line by line).
pub fn print_json(value: &impl Serialize) -> CliResult<()> {
    let mut line = serde_json::to_string(value)
        .map_err(|error| CliError::Runtime(format!("cannot encode the output as JSON: {error}")))?;
    line.push('\n');
    write_stdout(&line)
}

/// Writes `text` to stdout in one call and flushes it.
pub fn write_stdout(text: &str) -> CliResult<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| CliError::Runtime(format!("cannot write to stdout: {error}")))
}

/// A plain text table: left-aligned text columns, right-aligned number columns.
pub struct Table {
    header: Vec<&'static str>,
    numeric: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; `numeric` columns are right-aligned.
    pub fn new(columns: &[(&'static str, bool)]) -> Self {
        Table {
            header: columns.iter().map(|(name, _)| *name).collect(),
            numeric: columns.iter().map(|(_, numeric)| *numeric).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row after the header.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|name| name.len()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|name| (*name).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (index, cell) in row.iter().enumerate() {
                let width = widths.get(index).copied().unwrap_or(0);
                if index > 0 {
                    line.push_str("  ");
                }
                if self.numeric.get(index).copied().unwrap_or(false) {
                    line.push_str(&format!("{cell:>width$}"));
                } else {
                    line.push_str(&format!("{cell:<width$}"));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_text_left_and_numbers_right() {
        let mut table = Table::new(&[("QUEUE", false), ("PENDING", true)]);
        table.row(vec!["orders".into(), "7".into()]);
        table.row(vec!["q".into(), "12345678".into()]);
        assert_eq!(
            table.render(),
            "QUEUE    PENDING\norders         7\nq       12345678\n"
        );
    }
}
