use super::*;
use crate::lexer::tokenize;

/// `(name, line, lines)` of each function of `source`.
fn found(source: &str) -> Vec<(String, usize, usize)> {
    functions(&tokenize(source).expect("tokenizes"))
        .into_iter()
        .map(|f| (f.name, f.line, f.lines))
        .collect()
}

fn one(name: &str, line: usize, lines: usize) -> (String, usize, usize) {
    (name.to_owned(), line, lines)
}

#[test]
fn a_function_runs_from_its_fn_line_to_its_closing_brace() {
    let source = "
/// Docs and attributes are not counted.
#[inline]
pub(crate) async fn f(
    a: u8,
) -> u8 {
    a
}
";
    assert_eq!(found(source), [one("f", 4, 5)]);
}

#[test]
fn braces_in_strings_chars_and_comments_do_not_end_a_function() {
    let source = r###"fn f() {
    let a = "}";
    let b = '}';
    let c = r#"}"# ;
    let d = b'}';
    // }
    /* } /* } */ } */
    let e = "\"}";
    let f = '\'';
    let g = '\\';
}
fn h() {}
"###;
    assert_eq!(found(source), [one("f", 1, 11), one("h", 12, 1)]);
}

#[test]
fn a_lifetime_is_not_a_char_literal_that_hides_a_brace() {
    let source = "fn f<'a>(x: &'a str) -> &'a str {\n    'l: loop { break 'l; }\n    x\n}\n";
    assert_eq!(found(source), [one("f", 1, 4)]);
}

#[test]
fn methods_are_named_by_their_type_and_traits_by_their_trait() {
    let source = "
impl<S: Store> Limiter<S> where S: Clone {
    pub fn decide(&self) {}
}
impl<T> fmt::Display for Wrapper<T> {
    fn fmt(&self) {}
}
impl Drop for &mut Guard {
    fn drop(&mut self) {}
}
trait Named {
    fn name(&self) -> String;
    fn shout(&self) -> String { self.name() }
}
";
    assert_eq!(
        found(source),
        [
            one("Limiter::decide", 3, 1),
            one("Wrapper::fmt", 6, 1),
            one("Guard::drop", 9, 1),
            one("Named::shout", 13, 1),
        ]
    );
}

#[test]
fn nested_functions_and_inline_modules_qualify_names() {
    let source = "
fn outer() {
    fn inner() {
    }
    let f = |x: u8| { x };
}
mod tests {
    #[test]
    fn case() {}
}
";
    assert_eq!(
        found(source),
        [
            one("outer", 2, 5),
            one("outer::inner", 3, 2),
            one("tests::case", 9, 1)
        ]
    );
}

#[test]
fn fn_pointer_types_impl_trait_and_declarations_are_not_functions() {
    let source = "
type Callback = fn(u8) -> u8;
extern \"C\" { fn abort(); }
fn make() -> impl Fn(u8) -> u8 {
    |x| x
}
fn takes(f: fn(u8), g: impl Into<String>) {}
";
    assert_eq!(found(source), [one("make", 4, 3), one("takes", 7, 1)]);
}

#[test]
fn braces_in_a_signature_do_not_open_the_body() {
    let source = "fn f(a: [u8; { 2 }], b: Foo<{ N }>) -> u8 {\n    0\n}\n";
    assert_eq!(found(source), [one("f", 1, 3)]);
}

#[test]
fn a_repeated_name_is_numbered() {
    let source = "
impl From<u8> for Id { fn from(v: u8) -> Self { Id } }
impl From<u16> for Id { fn from(v: u16) -> Self { Id } }
";
    assert_eq!(
        found(source),
        [one("Id::from", 2, 1), one("Id::from[2]", 3, 1)]
    );
}
