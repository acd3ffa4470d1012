//! A transaction as text, one line per compare and op, for the spec tests:
//! read from `etcd_client::Txn`'s `Debug` form (its request is private),
//! keys and values as text, default fields left out.

use etcd_client::Txn;

/// A value of the `Debug` form.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Num(i64),
    Word(String),
    /// `Name { field: value, .. }`
    Struct(String, Vec<(String, V)>),
    /// `Name(value, ..)`
    Tuple(String, Vec<V>),
    List(Vec<V>),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn skip(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] == b' ' || self.s[self.i] == b',') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> u8 {
        self.skip();
        self.s.get(self.i).copied().unwrap_or(0)
    }

    fn eat(&mut self, c: u8) {
        assert_eq!(self.peek(), c, "at {}", self.i);
        self.i += 1;
    }

    fn word(&mut self) -> String {
        self.skip();
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || b"_-".contains(&self.s[self.i]))
        {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn value(&mut self) -> V {
        if self.peek() == b'[' {
            self.i += 1;
            let mut items = Vec::new();
            while self.peek() != b']' {
                items.push(self.value());
            }
            self.i += 1;
            return V::List(items);
        }
        let w = self.word();
        if let Ok(n) = w.parse() {
            return V::Num(n);
        }
        match self.peek() {
            b'{' => {
                self.i += 1;
                let mut fields = Vec::new();
                while self.peek() != b'}' {
                    let name = self.word();
                    self.eat(b':');
                    fields.push((name, self.value()));
                }
                self.i += 1;
                V::Struct(w, fields)
            }
            b'(' => {
                self.i += 1;
                let mut items = Vec::new();
                while self.peek() != b')' {
                    items.push(self.value());
                }
                self.i += 1;
                V::Tuple(w, items)
            }
            _ => V::Word(w),
        }
    }
}

fn field<'v>(fields: &'v [(String, V)], name: &str) -> &'v V {
    &fields.iter().find(|(n, _)| n == name).expect(name).1
}

fn bytes(v: &V) -> String {
    let V::List(items) = v else {
        panic!("not bytes: {v:?}")
    };
    let raw: Vec<u8> = items
        .iter()
        .map(|b| match b {
            V::Num(n) => u8::try_from(*n).expect("a byte"),
            other => panic!("not a byte: {other:?}"),
        })
        .collect();
    String::from_utf8_lossy(&raw).into_owned()
}

fn num(v: &V) -> i64 {
    match v {
        V::Num(n) => *n,
        other => panic!("not a number: {other:?}"),
    }
}

fn word(v: &V) -> &str {
    match v {
        V::Word(w) => w,
        other => panic!("not a word: {other:?}"),
    }
}

/// `key` or `key .. end`.
fn range(fields: &[(String, V)]) -> String {
    let key = bytes(field(fields, "key"));
    match bytes(field(fields, "range_end")) {
        end if end.is_empty() => key,
        end if end == "\0" => format!("{key} .. (end)"),
        end => format!("{key} .. {end}"),
    }
}

fn compare(v: &V) -> String {
    let V::Struct(_, f) = v else { panic!("{v:?}") };
    let op = match word(field(f, "result")) {
        "Equal" => "==",
        "Greater" => ">",
        "Less" => "<",
        "NotEqual" => "!=",
        other => other,
    };
    let V::Tuple(_, union) = field(f, "target_union") else {
        panic!("{f:?}")
    };
    let V::Tuple(target, value) = &union[0] else {
        panic!("{union:?}")
    };
    let value = match target.as_str() {
        "Value" => format!("{:?}", bytes(&value[0])),
        _ => num(&value[0]).to_string(),
    };
    let target = match target.as_str() {
        "CreateRevision" => "create",
        "ModRevision" => "mod",
        "Version" => "version",
        "Value" => "value",
        "Lease" => "lease",
        other => other,
    };
    format!("{target}({}) {op} {value}", range(f))
}

fn op(v: &V, depth: usize, out: &mut Vec<String>) {
    let V::Struct(_, f) = v else { panic!("{v:?}") };
    let V::Tuple(_, request) = field(f, "request") else {
        panic!("{f:?}")
    };
    let V::Tuple(kind, inner) = &request[0] else {
        panic!("{request:?}")
    };
    let V::Struct(_, f) = &inner[0] else {
        panic!("{inner:?}")
    };
    let pad = "  ".repeat(depth);
    let line = match kind.as_str() {
        "RequestPut" => {
            let mut line = format!(
                "put {} = {:?}",
                bytes(field(f, "key")),
                bytes(field(f, "value"))
            );
            match num(field(f, "lease")) {
                0 => {}
                lease => line += &format!(" lease={lease}"),
            }
            for flag in ["ignore_value", "ignore_lease", "prev_kv"] {
                if word(field(f, flag)) == "true" {
                    line += &format!(" {flag}");
                }
            }
            line
        }
        "RequestDeleteRange" => format!("delete {}", range(f)),
        "RequestRange" => {
            let mut line = format!("range {}", range(f));
            for (name, value) in f {
                match (name.as_str(), value) {
                    ("key" | "range_end", _) | (_, V::Num(0)) => {}
                    (_, V::Word(w)) if w == "false" => {}
                    ("sort_order", V::Word(w)) if w == "None" => {}
                    ("sort_target", V::Word(w)) if w == "Key" => {}
                    (_, V::Word(w)) if w == "true" => line += &format!(" {name}"),
                    (_, V::Num(n)) => line += &format!(" {name}={n}"),
                    (_, V::Word(w)) => line += &format!(" {name}={w}"),
                    (_, other) => line += &format!(" {name}={other:?}"),
                }
            }
            line
        }
        "RequestTxn" => {
            out.push(format!("{pad}txn"));
            request_lines(f, depth + 1, out);
            return;
        }
        other => format!("{other} {f:?}"),
    };
    out.push(format!("{pad}{line}"));
}

fn request_lines(f: &[(String, V)], depth: usize, out: &mut Vec<String>) {
    let pad = "  ".repeat(depth);
    for (part, name) in [("compare", "if"), ("success", "then"), ("failure", "else")] {
        let V::List(items) = field(f, part) else {
            panic!("{f:?}")
        };
        if items.is_empty() {
            continue;
        }
        out.push(format!("{pad}{name}"));
        for item in items {
            match part {
                "compare" => out.push(format!("{pad}  {}", compare(item))),
                _ => op(item, depth + 1, out),
            }
        }
    }
}

/// `txn` as text.
pub(super) fn txn(txn: &Txn) -> String {
    let debug = format!("{txn:?}");
    let mut p = Parser {
        s: debug.as_bytes(),
        i: 0,
    };
    let V::Struct(_, f) = p.value() else {
        panic!("{debug}")
    };
    let V::Struct(_, request) = field(&f, "req") else {
        panic!("{debug}")
    };
    let mut out = Vec::new();
    request_lines(request, 0, &mut out);
    out.join("\n")
}
