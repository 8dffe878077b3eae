//! Unit tests of the label selector: upstream's accepted and refused texts, its matching
//! semantics, the errors' positions, and a property test of parse and print.

use super::*;
use proptest::prelude::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
    Selector::parse(selector)
        .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
        .matches(&labels(pairs))
}

/// apimachinery's own good and bad strings (labels/selector_test.go), and more edge cases of
/// its lexer and parser, each with the canonical form upstream prints.
#[test]
fn accepts_what_labels_parse_accepts() {
    for (text, canonical) in [
        ("", ""),
        ("   ", ""),
        ("x=a,y=b,z=c", "x=a,y=b,z=c"),
        ("x!=a,y=b", "x!=a,y=b"),
        ("x=", "x="),
        ("x= ", "x="),
        ("x=,z= ", "x=,z="),
        ("x= ,z= ", "x=,z="),
        ("!x", "!x"),
        ("x>1", "x>1"),
        ("x>1,z<5", "x>1,z<5"),
        ("x==a", "x==a"),
        (
            "x in (foo,,baz),y,z notin ()",
            "x in (,baz,foo),y,z notin ()",
        ),
        ("x in (a)", "x in (a)"),
        ("x in(a)", "x in (a)"),
        ("x notin(a,b)", "x notin (a,b)"),
        ("x in (b,a,b)", "x in (a,b)"),
        ("x in (a,)", "x in (,a)"),
        ("x in (,a)", "x in (,a)"),
        ("x in (,)", "x in ()"),
        ("in in (in)", "in in (in)"),
        ("notin notin (notin,in)", "notin notin (in,notin)"),
        ("x = in", "x=in"),
        ("\tx\n=\r a ,\ty", "x=a,y"),
        ("z,!y,x=1", "x=1,!y,z"),
        ("example.com/pool=gpu", "example.com/pool=gpu"),
        (
            "node.kubernetes.io/instance-type in (n2-standard-8, n2-standard-16)",
            "node.kubernetes.io/instance-type in (n2-standard-16,n2-standard-8)",
        ),
        ("A_b.c-D=Z.y_x-9", "A_b.c-D=Z.y_x-9"),
        ("x>007", "x>007"),
        // A NUL byte ends the text as upstream's lexer reads it.
        ("x\0,y", "x,y"),
        ("\0x=(", ""),
    ] {
        let parsed = Selector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(parsed.to_string(), canonical, "{text:?}");
    }
    let long = format!("{}/{}={}", "a".repeat(253), "b".repeat(63), "c".repeat(63));
    assert!(Selector::parse(&long).is_ok());
}

#[test]
fn refuses_what_labels_parse_refuses() {
    for text in [
        "x=a||y=b",
        "x==a==b",
        "!x=a",
        "x<a",
        "x>-1",
        "x>1.5",
        "x>",
        ",",
        "x,",
        ",x",
        "x,,y",
        "=a",
        "!",
        "!!x",
        "!=a",
        "x y",
        "x !",
        "x in a",
        "x in (a",
        "x in (a,b",
        "x in (a b)",
        "x in (",
        "x in (=)",
        "x in (a,=)",
        "x in (b,,)",
        "x in (,,)",
        "x=(a,b)",
        "x=a b",
        "x in",
        "!x in (a)",
        "x notin",
        "x=!a",
        "x===a",
        "-x=a",
        "x-=a",
        "x=a-",
        "x=\"abc\"",
        "Example.com/x=a",
        "/x=a",
        "a/b/c=d",
        "example.com/=a",
        "exa_mple.com/x",
        "x=é",
        "é",
        "x\0y",
        "(x)",
        "x)",
    ] {
        assert!(Selector::parse(text).is_err(), "{text:?} parsed");
    }
    for text in [
        format!("{}=a", "k".repeat(64)),
        format!("{}/k=a", "p".repeat(254)),
        format!("k={}", "v".repeat(64)),
        format!("k in (a,{})", "v".repeat(64)),
    ] {
        assert!(Selector::parse(&text).is_err(), "{text:?} parsed");
    }
}

/// Kubernetes' semantics: `!=` and `notin` select nodes without the key; `!a` only those;
/// `in` and `=` need the key; `>` and `<` need an integer value.
#[test]
fn matches_as_kubernetes_does() {
    let node = [("pool", "gpu"), ("zone", "a"), ("cores", "16")];
    assert!(selects("", &[]));
    assert!(selects("", &node));
    assert!(selects("pool=gpu", &node));
    assert!(selects("pool==gpu", &node));
    assert!(!selects("pool=cpu", &node));
    assert!(!selects("pool=gpu", &[]));
    assert!(selects("pool!=cpu", &node));
    assert!(
        selects("pool!=cpu", &[]),
        "!= matches a node without the key"
    );
    assert!(!selects("pool!=gpu", &node));
    assert!(selects("pool in (cpu,gpu)", &node));
    assert!(!selects("pool in (cpu)", &node));
    assert!(!selects("pool in (gpu)", &[]));
    assert!(selects("pool notin (cpu)", &node));
    assert!(
        selects("pool notin (gpu)", &[]),
        "notin matches a node without the key"
    );
    assert!(!selects("pool notin (gpu)", &node));
    assert!(selects("pool", &node));
    assert!(!selects("pool", &[]));
    assert!(selects("!pool", &[]));
    assert!(!selects("!pool", &node), "!a only without it");
    assert!(selects("pool=gpu,zone in (a,b),!spot", &node));
    assert!(!selects("pool=gpu,zone in (b)", &node), "a comma is AND");
    assert!(selects("cores>8", &node));
    assert!(!selects("cores>16", &node));
    assert!(selects("cores<17", &node));
    assert!(!selects("cores>8", &[]));
    assert!(
        !selects("zone>1", &node),
        "a value that is no integer never compares"
    );
    assert!(selects("pool=", &[("pool", "")]));
    assert!(!selects("pool=", &[]));
    assert!(selects("pool in (,x)", &[("pool", "")]));
    assert!(selects("pool in ()", &[("pool", "")]));
}

#[test]
fn errors_say_where_what_and_why() {
    let err = Selector::parse("pool in (gpu tpu)").unwrap_err();
    assert_eq!((err.offset, err.column), (13, 14), "{err}");
    assert_eq!(err.found, "tpu");
    assert_eq!(
        err.to_string(),
        "column 14: found `tpu`, expected `,` or `)`"
    );
    let err = Selector::parse("pool=gpu,").unwrap_err();
    assert_eq!(err.column, 10);
    assert!(err.problem.contains("found the end"), "{err}");
    let err = Selector::parse("a, Pool.Example/x=1").unwrap_err();
    assert_eq!(err.column, 4);
    assert!(err.problem.contains("DNS subdomain"), "{err}");
    let err = Selector::parse("zone in (a,-b)").unwrap_err();
    assert_eq!(err.column, 12);
    assert!(err.problem.contains("label value"), "{err}");
    let err = Selector::parse("cores>many").unwrap_err();
    assert!(err.problem.contains("integer"), "{err}");
    let err = Selector::parse("é=1").unwrap_err();
    assert_eq!(err.column, 1);
    let err = Selector::parse("é,é x").unwrap_err();
    assert_eq!(err.column, 1, "the first bad key: {err}");
    let err = Selector::parse("ab x").unwrap_err();
    assert!(err.problem.contains("an operator"), "{err}");
    assert_eq!(err.column, 4);
}

fn key_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9]{0,6}",
        "[a-z]{1,5}\\.[a-z]{2,3}/[A-Za-z][-_.A-Za-z0-9]{0,5}[A-Za-z0-9]",
    ]
}

fn value_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "",
        "[A-Za-z0-9]",
        "[A-Za-z0-9][-_.A-Za-z0-9]{0,5}[A-Za-z0-9]"
    ]
}

fn requirement_strategy() -> impl Strategy<Value = String> {
    (
        key_strategy(),
        0..7usize,
        proptest::collection::vec(value_strategy(), 1..4),
    )
        .prop_map(|(key, op, values)| match op {
            0 => key,
            1 => format!("!{key}"),
            2 => format!("{key}={}", values[0]),
            3 => format!("{key} != {}", values[0]),
            // Lists of values that are not empty: runs of empty values between commas parse
            // only in some lengths upstream (`(a,,b)` yes, `(,,)` no), tested above.
            4 => format!("{key} in ({})", filled(&values).join(",")),
            5 => format!("{key} notin ( {} )", filled(&values).join(" , ")),
            _ => format!("{key}>{}", values.len()),
        })
}

/// `values` with each empty one replaced by `v`.
fn filled(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| {
            if v.is_empty() {
                "v".to_string()
            } else {
                v.clone()
            }
        })
        .collect()
}

proptest! {
    /// What parses prints as a selector that parses to the same value, and matches alike.
    #[test]
    fn canonical_form_round_trips(
        requirements in proptest::collection::vec(requirement_strategy(), 0..5),
        node in proptest::collection::btree_map(key_strategy(), value_strategy(), 0..4),
    ) {
        let text = requirements.join(",");
        let parsed = Selector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let again = Selector::parse(&parsed.to_string()).map_err(|e| TestCaseError::fail(format!("{parsed}: {e}")))?;
        prop_assert_eq!(&again, &parsed);
        prop_assert_eq!(again.matches(&node), parsed.matches(&node));
        // AND: the selector matches exactly when each requirement alone does.
        let each = requirements.iter().all(|r| Selector::parse(r).map(|s| s.matches(&node)).unwrap_or(false));
        prop_assert_eq!(parsed.matches(&node), each);
    }

    /// Any text (the selector's own alphabet, or any Unicode with NUL): parsing never panics,
    /// an error's offset is inside the text, and what parses prints back to itself.
    #[test]
    fn any_text_parses_or_says_where(text in prop_oneof!["[ a-z!=(),<>in0-9/.\\-]{0,24}", any::<String>()]) {
        match Selector::parse(&text) {
            Err(err) => {
                prop_assert!(err.offset <= text.len());
                prop_assert!(err.column >= 1);
            }
            Ok(parsed) => prop_assert_eq!(Selector::parse(&parsed.to_string()), Ok(parsed)),
        }
    }
}
