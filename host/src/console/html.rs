//! A tiny HTML writer that cannot forget to escape: markup (tag and attribute names, static
//! fragments) is `&'static str` only, so nothing read at run time can become markup; every
//! runtime value goes through [`Html::text`] or an attribute value, both escaped. Links are built
//! by [`href`], which percent-encodes every query value.

use std::fmt::Write as _;

/// An HTML document or fragment being written.
#[derive(Debug, Default)]
pub struct Html {
    out: String,
}

/// `&`, `<`, `>`, `"` and `'` as entities.
pub fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

impl Html {
    /// An empty document.
    pub fn new() -> Html {
        Html::default()
    }

    /// Static markup (a doctype, a fixed fragment).
    pub fn markup(&mut self, markup: &'static str) -> &mut Html {
        self.out.push_str(markup);
        self
    }

    /// `<tag a="v" …>` with every value escaped; an attribute whose value is `None`-like empty
    /// flag (`("checked", "")`) is written bare.
    pub fn open(&mut self, tag: &'static str, attrs: &[(&'static str, &str)]) -> &mut Html {
        self.out.push('<');
        self.out.push_str(tag);
        for (name, value) in attrs {
            self.out.push(' ');
            self.out.push_str(name);
            if !value.is_empty() || !is_flag(name) {
                self.out.push_str("=\"");
                escape(value, &mut self.out);
                self.out.push('"');
            }
        }
        self.out.push('>');
        self
    }

    /// `</tag>`.
    pub fn close(&mut self, tag: &'static str) -> &mut Html {
        self.out.push_str("</");
        self.out.push_str(tag);
        self.out.push('>');
        self
    }

    /// Text, escaped.
    pub fn text(&mut self, text: &str) -> &mut Html {
        escape(text, &mut self.out);
        self
    }

    /// `<tag attrs>text</tag>`.
    pub fn el(
        &mut self,
        tag: &'static str,
        attrs: &[(&'static str, &str)],
        text: &str,
    ) -> &mut Html {
        self.open(tag, attrs).text(text).close(tag)
    }

    /// A number as text.
    pub fn num(&mut self, value: impl std::fmt::Display) -> &mut Html {
        let _ = write!(self.out, "{value}");
        self
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Attributes written without a value when empty.
fn is_flag(name: &str) -> bool {
    matches!(
        name,
        "checked" | "selected" | "disabled" | "required" | "open"
    )
}

/// `path?k=v&…` with each value percent-encoded; empty values are left out.
pub fn href(path: &'static str, params: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (key, value) in params {
        if !value.is_empty() {
            query.append_pair(key, value);
            any = true;
        }
    }
    if any {
        format!("{path}?{}", query.finish())
    } else {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_escaped() {
        let mut html = Html::new();
        html.open("td", &[("title", "\"><script>")])
            .text("<script>alert('x')</script> & more")
            .close("td");
        assert_eq!(
            html.finish(),
            "<td title=\"&quot;&gt;&lt;script&gt;\">&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more</td>"
        );
    }

    #[test]
    fn links_encode_their_values() {
        assert_eq!(
            href(
                "/event",
                &[("app", "a b"), ("id", "x&y=<z>"), ("empty", "")]
            ),
            "/event?app=a+b&id=x%26y%3D%3Cz%3E"
        );
        assert_eq!(href("/events", &[("type", "")]), "/events");
        let mut html = Html::new();
        html.open("input", &[("type", "checkbox"), ("checked", "")]);
        assert_eq!(html.finish(), "<input type=\"checkbox\" checked>");
    }
}
