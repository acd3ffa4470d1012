//! The tokens of a Rust source file that name modules and paths:
//! identifiers, `::` and punctuation, with their line numbers. Comments
//! (doc comments too), string, raw string and char literals, numbers and
//! lifetimes are dropped, so text that only looks like code never counts.

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// A token and the line (from 1) it starts on.
#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The tokens of `src`.
pub fn lex(src: &str) -> Vec<Token> {
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Advances over s[from..to], counting newlines.
    let skip = |from: usize, to: usize, line: &mut usize| {
        *line += s[from..to.min(s.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
        to
    };
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < s.len() && depth > 0 {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            i = skip(i, j, &mut line);
        } else if c == '"' {
            i = skip(i, end_of_string(&s, i + 1), &mut line);
        } else if let Some(end) = raw_string(&s, i) {
            i = skip(i, end, &mut line);
        } else if c == '\'' {
            i = skip(i, end_of_char_or_lifetime(&s, i), &mut line);
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            // A string's prefix (b"", c"") is not a name.
            if s.get(i) != Some(&'"') {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else if c.is_ascii_digit() {
            while i < s.len()
                && (is_ident_char(s[i])
                    || s[i] == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit))
            {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            if c == '\n' {
                line += 1;
            } else if !c.is_whitespace() {
                out.push(Token {
                    tok: Tok::Punct(c),
                    line,
                });
            }
            i += 1;
        }
    }
    out
}

/// The index after the closing quote of a string whose body starts at `i`.
fn end_of_string(s: &[char], mut i: usize) -> usize {
    while i < s.len() {
        match s[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The end of a raw string (`r"…"`, `r#"…"#`, `br#"…"#`, `cr"…"`)
/// starting at `i`, if one starts there (`r#ident` is a raw identifier).
fn raw_string(s: &[char], i: usize) -> Option<usize> {
    if i > 0 && is_ident_char(s[i - 1]) {
        return None;
    }
    let mut j = i;
    if matches!(s.get(j), Some('b' | 'c')) {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if s.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < s.len() {
        if s[j] == '"'
            && s[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(j)
}

/// The index after a char literal or a lifetime's quote starting at `i`.
fn end_of_char_or_lifetime(s: &[char], i: usize) -> usize {
    match (s.get(i + 1), s.get(i + 2)) {
        (Some('\\'), _) => {
            // Past the backslash and the escaped char, to the closing quote.
            let mut j = i + 3;
            while j < s.len() && s[j] != '\'' {
                j += 1;
            }
            j + 1
        }
        (Some(_), Some('\'')) => i + 3,
        // A lifetime: its name follows as an identifier.
        _ => i + 1,
    }
}
