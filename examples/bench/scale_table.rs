//! The scale curves' tables, printed as Markdown (as `docs/` shows them).

/// A titled table with notes under it.
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|h| (*h).into()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn note(&mut self, note: &str) {
        self.notes.push(note.into());
    }

    /// The table as Markdown.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut s = format!("**{}**\n\n", self.title);
        s += &line(&self.header);
        s += &line(&vec!["---".to_string(); self.header.len()]);
        for r in &self.rows {
            s += &line(r);
        }
        for n in &self.notes {
            s += &format!("\n{n}\n");
        }
        s
    }
}
