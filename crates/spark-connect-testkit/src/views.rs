//! Temporary views of the test server's sessions.
//!
//! Uploaded data is queried with SQL once it has a name
//! (`df.createOrReplaceTempView("t")`, then `SELECT * FROM t`), so the test
//! server keeps each session's temporary views: a case-insensitive name
//! mapped to the rows its input stood for when the view was created, with
//! Spark's errors for a name taken (`TEMP_TABLE_OR_VIEW_ALREADY_EXISTS`)
//! or not valid (`_LEGACY_ERROR_TEMP_1321`).
//!
//! A view name here is one plain identifier (`[A-Za-z_][A-Za-z0-9_]*`), the
//! only table name the test server's SQL can read; Spark also accepts
//! qualified and back-quoted names.

use std::collections::HashMap;

use crate::error::SparkException;
use crate::sql_grammar::{Source, View};

/// The key a view is stored and looked up under (Spark's default
/// `spark.sql.caseSensitive=false`).
pub(crate) fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// Registers `view` among a session's `views`, replacing one of the same
/// name only when the view asks to.
pub(crate) fn register(
    views: &mut HashMap<String, Source>,
    view: View,
) -> Result<(), SparkException> {
    let key = key(&view.name);
    if !view.replace && views.contains_key(&key) {
        return Err(SparkException::temp_view_already_exists(&view.name));
    }
    views.insert(key, view.source);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql_grammar::parse_sql;

    fn view(name: &str, rows: &str, replace: bool) -> View {
        let source = parse_sql(&format!("SELECT * FROM range({rows})"), &|_| None).unwrap();
        View {
            name: name.to_owned(),
            source,
            replace,
        }
    }

    #[test]
    fn a_taken_name_fails_unless_replaced() {
        let mut views = HashMap::new();
        register(&mut views, view("Lookup", "3", false)).unwrap();
        let e = register(&mut views, view("LOOKUP", "5", false)).unwrap_err();
        assert_eq!(
            e.error_class.as_deref(),
            Some("TEMP_TABLE_OR_VIEW_ALREADY_EXISTS")
        );
        assert_eq!(e.message_parameters["relationName"], "`LOOKUP`");
        assert_eq!(views["lookup"].row_count(), 3);
        register(&mut views, view("lookup", "5", true)).unwrap();
        assert_eq!(views["lookup"].row_count(), 5);
        assert_eq!(views.len(), 1);
    }

    #[test]
    fn names_are_plain_identifiers() {
        for ok in ["t", "_t1", "Lookup_2"] {
            crate::sql_grammar::check_view_name(ok).unwrap();
        }
        for bad in ["", "my view", "1t", "a.b", "`t`", "é"] {
            let e = crate::sql_grammar::check_view_name(bad).unwrap_err();
            assert_eq!(e.error_class.as_deref(), Some("_LEGACY_ERROR_TEMP_1321"));
            assert_eq!(e.message_parameters["viewName"], bad);
        }
    }
}
