//! Globs on event types, as `[[route]]` and the console's event search read them: `*` matches
//! any run of characters (including none), `?` exactly one character, anything else itself.

/// Whether `text` matches `glob`: `*` matches any run of characters (including none), `?`
/// exactly one character, anything else itself.
pub fn glob_match(glob: &str, text: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut g, mut t) = (0, 0);
    // Position after the last `*` seen, and the text position it is currently matched up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g + 1, t));
                g += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((after, matched)) => {
                    g = after;
                    t = matched + 1;
                    star = Some((after, matched + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "room.created"));
        assert!(glob_match("room.*", "room.created"));
        assert!(!glob_match("room.*", "user.created"));
        assert!(glob_match("room.?reated", "room.created"));
        assert!(!glob_match("room.?", "room.ab"));
        assert!(glob_match("*.member.*", "room.member.joined"));
        assert!(glob_match("a*b*c", "aXXbYYbZc"));
        assert!(!glob_match("a*b*c", "aXXbYYbZ"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }
}
