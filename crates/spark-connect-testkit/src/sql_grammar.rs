//! The plans the test server understands: `Range`, a tiny SQL grammar over
//! `range(...)` and temporary views, the client's own rows
//! ([`local`](super::local)), and the command that names a relation as a
//! temporary view. Results are real Arrow IPC streams.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use crate::edit::ResultEdit;
use crate::error::{SparkException, unsupported};
use crate::local::{self, Cache, LocalTable, arrow_failed, write_ipc};
use crate::sql_params::Args;
use spark_connect_retry::proto::{Plan, Relation, Sql, SqlCommand, command, plan, relation};

/// The columns a query returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Columns {
    /// `id` Int64 not null.
    Id,
    /// `id` Int64, `x` = `id * 2` Int64, both not null.
    IdAndDouble,
    /// A single column named `1`, Int32 not null, one row (`SELECT 1`).
    One,
}

/// A query producing rows: `start, start+step, ...` below `end` (for
/// [`Columns::One`] the range is `0..1` and unused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Query {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) step: i64,
    pub(crate) columns: Columns,
}

/// Where the rows of a result come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A range query.
    Range(Query),
    /// Rows the client sent (a local relation).
    Local(Arc<LocalTable>),
    /// A range query's rows, changed ([`ResultEdit`]).
    Edited(Query, ResultEdit),
}

impl Source {
    /// The number of rows.
    pub(crate) fn row_count(&self) -> u64 {
        match self {
            Source::Range(q) => q.row_count(),
            Source::Local(t) => t.row_count(),
            Source::Edited(q, edit) => edit.row_count(q.row_count()),
        }
    }

    /// How many rows, at most `max`, the response starting at `offset` holds.
    pub(crate) fn next_len(&self, offset: u64, max: u64) -> u64 {
        match self {
            Source::Range(q) => max.min(q.row_count().saturating_sub(offset)),
            Source::Local(t) => t.next_len(offset, max),
            Source::Edited(q, edit) => {
                max.min(edit.row_count(q.row_count()).saturating_sub(offset))
            }
        }
    }

    /// Rows `first .. first + len` as one Arrow IPC stream.
    pub(crate) fn ipc_batch(&self, first: u64, len: u64) -> Result<Vec<u8>, SparkException> {
        match self {
            Source::Range(q) => q.ipc_batch(first, len),
            Source::Local(t) => t.ipc_batch(first, len),
            Source::Edited(q, edit) => q.ipc_batch_shifted(first, len, edit.shift()),
        }
    }

    /// The schema as Spark describes it (`DataType`), sent before the rows.
    pub(crate) fn spark_schema(&self) -> spark_connect_retry::proto::DataType {
        match self {
            Source::Range(q) | Source::Edited(q, _) => q.spark_schema(),
            Source::Local(t) => t.spark_schema(),
        }
    }
}

/// What an ExecutePlan produces.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// Arrow batches of a query.
    Rows(Source),
    /// A `SqlCommandResult` echoing this relation (`spark.sql(...)`).
    SqlCommand(Relation),
    /// A temporary view to register in the session (no rows).
    CreateView(View),
}

/// A session temporary view, its input resolved when it is created (as
/// Spark analyses a DataFrame's plan when it becomes a view).
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// The name as given.
    pub(crate) name: String,
    /// The rows the view stands for.
    pub(crate) source: Source,
    /// Replace a view of that name instead of failing.
    pub(crate) replace: bool,
}

/// What a plan may refer to in its session.
pub(crate) struct Catalog<'a> {
    /// The session's artifacts (for cached local relations).
    pub(crate) cache: Cache<'a>,
    /// The session's temporary views, by name (case-insensitive).
    pub(crate) views: &'a dyn Fn(&str) -> Option<Source>,
    /// Names the session in errors, as Spark does.
    pub(crate) session_uuid: &'a str,
}

/// Maps a plan to the work it asks for, or to the error Spark would raise.
pub(crate) fn parse_plan(
    plan: Option<&Plan>,
    catalog: &Catalog<'_>,
) -> Result<Work, SparkException> {
    match plan.and_then(|p| p.op_type.as_ref()) {
        Some(plan::OpType::Root(rel)) => Ok(Work::Rows(parse_relation(rel, catalog)?)),
        Some(plan::OpType::Command(cmd)) => match &cmd.command_type {
            Some(command::CommandType::SqlCommand(cmd)) => {
                let rel = sql_command_input(cmd)?;
                if let Some(relation::RelType::Sql(s)) = &rel.rel_type {
                    // Spark analyses the query eagerly, so a bad query
                    // fails the command.
                    parse_sql_with(&s.query, catalog.views, &Args::of(s))?;
                }
                Ok(Work::SqlCommand(rel))
            }
            Some(command::CommandType::CreateDataframeView(v)) => {
                if v.is_global {
                    return Err(unsupported("global temporary views"));
                }
                check_view_name(&v.name)?;
                let input = v.input.as_ref().ok_or_else(|| {
                    SparkException::invalid_plan_input("CreateDataFrameViewCommand has no input.")
                })?;
                Ok(Work::CreateView(View {
                    name: v.name.clone(),
                    source: parse_relation(input, catalog)?,
                    replace: v.replace,
                }))
            }
            // Commands this server does not model (and ones added later).
            _ => Err(unsupported("this command")),
        },
        // Decompressed before (the server's `codec`): one inside another.
        Some(plan::OpType::CompressedOperation(_)) => {
            Err(unsupported("a compressed plan inside a compressed plan"))
        }
        None => Err(SparkException::java(
            "java.lang.IllegalArgumentException",
            "requirement failed: the plan is empty",
        )),
    }
}

/// The relation a `SqlCommand` runs. Clients since Spark 3.5 (PySpark) put
/// it in `input`; the JVM client 4.3 still sends the query in the older
/// fields (`sql`, `args`, `pos_args`, `named_arguments`, `pos_arguments`),
/// which Spark's planner turns into the same SQL relation, as here.
fn sql_command_input(cmd: &SqlCommand) -> Result<Relation, SparkException> {
    match &cmd.input {
        Some(
            rel @ Relation {
                rel_type: Some(relation::RelType::Sql(_)),
                ..
            },
        ) => Ok(rel.clone()),
        Some(_) => Err(unsupported(
            "a SqlCommand whose input is not a SQL relation",
        )),
        None => Ok(Relation {
            common: None,
            rel_type: Some(relation::RelType::Sql(Sql {
                query: cmd.sql.clone(),
                args: cmd.args.clone(),
                pos_args: cmd.pos_args.clone(),
                named_arguments: cmd.named_arguments.clone(),
                pos_arguments: cmd.pos_arguments.clone(),
            })),
        }),
    }
}

fn parse_relation(rel: &Relation, catalog: &Catalog<'_>) -> Result<Source, SparkException> {
    match &rel.rel_type {
        Some(relation::RelType::Range(r)) => {
            range(r.start.unwrap_or(0), r.end, r.step).map(Source::Range)
        }
        Some(relation::RelType::Sql(s)) => parse_sql_with(&s.query, catalog.views, &Args::of(s)),
        Some(
            rel @ (relation::RelType::LocalRelation(_)
            | relation::RelType::CachedLocalRelation(_)
            | relation::RelType::ChunkedCachedLocalRelation(_)),
        ) => Ok(Source::Local(Arc::new(local::resolve(
            rel,
            catalog.cache,
            catalog.session_uuid,
        )?))),
        None => Err(unsupported("this relation")),
    }
}

/// `step == 0` is rejected like Spark's `Range` does. A proto3 `step` of 0
/// also means "unset", which Spark clients never send; PySpark sends 1.
fn range(start: i64, end: i64, step: i64) -> Result<Query, SparkException> {
    if step == 0 {
        return Err(SparkException::java(
            "java.lang.IllegalArgumentException",
            "requirement failed: step (0) cannot be 0",
        ));
    }
    Ok(Query {
        start,
        end,
        step,
        columns: Columns::Id,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Num(i64),
    Sym(char),
    /// `:name`, bound by the relation's parameters.
    Named(String),
    /// The n-th `?` (from 0).
    Positional(usize),
}

impl Tok {
    fn shown(&self) -> String {
        match self {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Num(n) => format!("'{n}'"),
            Tok::Sym(c) => format!("'{c}'"),
            Tok::Named(n) => format!("':{n}'"),
            Tok::Positional(_) => "'?'".to_owned(),
        }
    }
}

fn tokenize(q: &str) -> Result<Vec<Tok>, SparkException> {
    let mut toks = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_ascii_alphabetic() || c == '_' {
            let mut w = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    w.push(c.to_ascii_lowercase());
                    chars.next();
                } else {
                    break;
                }
            }
            toks.push(Tok::Word(w));
        } else if c.is_ascii_digit() {
            let mut n = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_digit() {
                    n.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            let v = n
                .parse::<i64>()
                .map_err(|_| SparkException::parse_syntax_error(&format!("'{n}'")))?;
            toks.push(Tok::Num(v));
        } else if c == ':' {
            chars.next();
            let mut name = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            if name.is_empty() {
                return Err(SparkException::parse_syntax_error("':'"));
            }
            toks.push(Tok::Named(name));
        } else if c == '?' {
            chars.next();
            let n = toks
                .iter()
                .filter(|t| matches!(t, Tok::Positional(_)))
                .count();
            toks.push(Tok::Positional(n));
        } else if "(),*;-".contains(c) {
            toks.push(Tok::Sym(c));
            chars.next();
        } else {
            return Err(SparkException::parse_syntax_error(&format!("'{c}'")));
        }
    }
    // A trailing semicolon is allowed, as in spark.sql.
    if toks.last() == Some(&Tok::Sym(';')) {
        toks.pop();
    }
    Ok(toks)
}

struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    args: &'a Args,
}

impl Parser<'_> {
    fn error(&self) -> SparkException {
        match self.toks.get(self.pos) {
            Some(t) => SparkException::parse_syntax_error(&t.shown()),
            None => SparkException::parse_syntax_error("end of input"),
        }
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.toks.get(self.pos) == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: Tok) -> Result<(), SparkException> {
        if self.eat(&t) {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn word(&mut self, w: &str) -> Result<(), SparkException> {
        self.expect(Tok::Word(w.to_owned()))
    }

    fn number(&mut self) -> Result<i64, SparkException> {
        let neg = self.eat(&Tok::Sym('-'));
        match self.toks.get(self.pos) {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Ok(if neg { -n } else { *n })
            }
            Some(Tok::Named(name)) => {
                let v = self.args.named(name)?;
                self.pos += 1;
                Ok(if neg { v.wrapping_neg() } else { v })
            }
            Some(Tok::Positional(i)) => {
                let v = self.args.positional(*i)?;
                self.pos += 1;
                Ok(if neg { v.wrapping_neg() } else { v })
            }
            _ => Err(self.error()),
        }
    }

    fn at_end(&self) -> bool {
        self.pos == self.toks.len()
    }
}

/// Parses the supported SQL (case-insensitive):
/// `SELECT 1`, `SELECT * FROM range(..)`, `SELECT id FROM range(..)`,
/// `SELECT id, id*2 AS x FROM range(..)`, where `range(..)` is `range(end)`,
/// `range(start, end)` or `range(start, end, step)`, and `SELECT * FROM v`
/// for a temporary view `v` found by `views`.
#[cfg(test)]
pub(crate) fn parse_sql(
    q: &str,
    views: &dyn Fn(&str) -> Option<Source>,
) -> Result<Source, SparkException> {
    parse_sql_with(q, views, &Args::default())
}

/// [`parse_sql`], where a number may also be a `:name` or `?` marker bound
/// to an integer literal in `args` (an unbound one fails as Spark's
/// `UNBOUND_SQL_PARAMETER`).
pub(crate) fn parse_sql_with(
    q: &str,
    views: &dyn Fn(&str) -> Option<Source>,
    args: &Args,
) -> Result<Source, SparkException> {
    let mut p = Parser {
        toks: tokenize(q)?,
        pos: 0,
        args,
    };
    p.word("select")?;
    if p.eat(&Tok::Num(1)) {
        if !p.at_end() {
            return Err(p.error());
        }
        return Ok(Source::Range(Query {
            start: 0,
            end: 1,
            step: 1,
            columns: Columns::One,
        }));
    }
    let star = p.eat(&Tok::Sym('*'));
    let columns = if star {
        Columns::Id
    } else {
        p.word("id")?;
        if p.eat(&Tok::Sym(',')) {
            p.word("id")?;
            p.expect(Tok::Sym('*'))?;
            p.expect(Tok::Num(2))?;
            p.word("as")?;
            p.word("x")?;
            Columns::IdAndDouble
        } else {
            Columns::Id
        }
    };
    p.word("from")?;
    if p.toks.get(p.pos + 1) != Some(&Tok::Sym('(')) {
        // A table name: only a temporary view, and only all of it.
        let Some(Tok::Word(name)) = p.toks.get(p.pos).cloned() else {
            return Err(p.error());
        };
        p.pos += 1;
        if !p.at_end() {
            return Err(p.error());
        }
        let source = views(&name).ok_or_else(|| SparkException::table_or_view_not_found(&name))?;
        if !star {
            return Err(unsupported("selecting columns of a view (only SELECT *)"));
        }
        return Ok(source);
    }
    p.word("range")?;
    p.expect(Tok::Sym('('))?;
    let mut args = vec![p.number()?];
    while p.eat(&Tok::Sym(',')) && args.len() < 3 {
        args.push(p.number()?);
    }
    p.expect(Tok::Sym(')'))?;
    if !p.at_end() {
        return Err(p.error());
    }
    let (start, end, step) = match args[..] {
        [end] => (0, end, 1),
        [start, end] => (start, end, 1),
        [start, end, step] => (start, end, step),
        _ => return Err(p.error()),
    };
    let mut query = range(start, end, step)?;
    query.columns = columns;
    Ok(Source::Range(query))
}

impl Query {
    /// The number of rows, computed without overflow.
    pub(crate) fn row_count(&self) -> u64 {
        if self.columns == Columns::One {
            return 1;
        }
        let (start, end, step) = (
            i128::from(self.start),
            i128::from(self.end),
            i128::from(self.step),
        );
        let span = if step > 0 { end - start } else { start - end };
        if span <= 0 {
            return 0;
        }
        let n = (span + step.abs() - 1) / step.abs();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// The schema as Spark describes it (`DataType`), sent before the rows.
    pub(crate) fn spark_schema(&self) -> spark_connect_retry::proto::DataType {
        use spark_connect_retry::proto::data_type::{self as dt, Kind};
        let field = |name: &str, kind: Kind| dt::StructField {
            name: name.to_owned(),
            data_type: Some(spark_connect_retry::proto::DataType { kind: Some(kind) }),
            nullable: false,
            metadata: None,
        };
        let fields = self
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int32 => field(f.name(), Kind::Integer(Default::default())),
                _ => field(f.name(), Kind::Long(Default::default())),
            })
            .collect();
        spark_connect_retry::proto::DataType {
            kind: Some(Kind::Struct(dt::Struct {
                fields,
                type_variation_reference: 0,
            })),
        }
    }

    fn schema(&self) -> Arc<Schema> {
        let fields = match self.columns {
            Columns::Id => vec![Field::new("id", DataType::Int64, false)],
            Columns::IdAndDouble => vec![
                Field::new("id", DataType::Int64, false),
                Field::new("x", DataType::Int64, false),
            ],
            Columns::One => vec![Field::new("1", DataType::Int32, false)],
        };
        Arc::new(Schema::new(fields))
    }

    /// One Arrow IPC stream (schema + one record batch) holding rows
    /// `first .. first + len`.
    pub(crate) fn ipc_batch(&self, first: u64, len: u64) -> Result<Vec<u8>, SparkException> {
        self.ipc_batch_shifted(first, len, None)
    }

    /// [`ipc_batch`](Self::ipc_batch), with `by` added to the `id` of the
    /// rows from `from_row` on (`shift: Some((from_row, by))`).
    pub(crate) fn ipc_batch_shifted(
        &self,
        first: u64,
        len: u64,
        shift: Option<(u64, i64)>,
    ) -> Result<Vec<u8>, SparkException> {
        let schema = self.schema();
        let columns: Vec<ArrayRef> = match self.columns {
            Columns::One => vec![Arc::new(Int32Array::from(vec![1; len as usize]))],
            Columns::Id | Columns::IdAndDouble => {
                // Values stay inside [start, end), so they fit i64; the
                // i128 math only guards the intermediate product.
                let ids: Vec<i64> = (first..first + len)
                    .map(|i| {
                        let id =
                            (i128::from(self.start) + i128::from(i) * i128::from(self.step)) as i64;
                        match shift {
                            Some((from, by)) if i >= from => id.wrapping_add(by),
                            _ => id,
                        }
                    })
                    .collect();
                let mut cols: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids.clone()))];
                if self.columns == Columns::IdAndDouble {
                    let x: Vec<i64> = ids.iter().map(|v| v.wrapping_mul(2)).collect();
                    cols.push(Arc::new(Int64Array::from(x)));
                }
                cols
            }
        };
        let batch = RecordBatch::try_new(schema.clone(), columns).map_err(arrow_failed)?;
        write_ipc(&schema, &batch)
    }
}

/// Rejects a name the test server's SQL could never read.
pub(crate) fn check_view_name(name: &str) -> Result<(), SparkException> {
    let mut chars = name.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        Ok(())
    } else {
        Err(SparkException::invalid_view_name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_views(_: &str) -> Option<Source> {
        None
    }

    /// The range query `q` parses to (no views).
    fn query(q: &str) -> Result<Query, SparkException> {
        match parse_sql(q, &no_views)? {
            Source::Range(q) => Ok(q),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn grammar() {
        let q = query("select * from RANGE(10)").unwrap();
        assert_eq!((q.start, q.end, q.step, q.columns), (0, 10, 1, Columns::Id));
        let q = query("SELECT id, id * 2 AS x FROM range(3, 9);").unwrap();
        assert_eq!((q.start, q.end, q.columns), (3, 9, Columns::IdAndDouble));
        assert_eq!(query("SELECT 1").unwrap().columns, Columns::One);
        let e = query("SELEC 1").unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("PARSE_SYNTAX_ERROR"));
        assert_eq!(e.message_parameters["error"], "'selec'");
        let e = query("SELECT id FROM range(").unwrap_err();
        assert_eq!(e.message_parameters["error"], "end of input");
        assert!(query("SELECT id FROM range(99999999999999999999)").is_err());
        let e = query("SELECT * FROM").unwrap_err();
        assert_eq!(e.message_parameters["error"], "end of input");
    }

    #[test]
    fn markers_take_their_bound_integers() {
        use spark_connect_retry::proto::expression::{ExprType, Literal, literal::LiteralType};
        let long = |v: i64| spark_connect_retry::proto::Expression {
            expr_type: Some(ExprType::Literal(Literal {
                literal_type: Some(LiteralType::Long(v)),
                data_type: None,
            })),
        };
        let sql = spark_connect_retry::proto::Sql {
            named_arguments: [("n".to_owned(), long(9)), ("s".to_owned(), long(2))].into(),
            pos_arguments: vec![long(3), long(7)],
            ..Default::default()
        };
        let args = Args::of(&sql);
        let q = |text: &str| match parse_sql_with(text, &no_views, &args) {
            Ok(Source::Range(q)) => Ok((q.start, q.end, q.step)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(q("SELECT id FROM range(:n)").unwrap(), (0, 9, 1));
        assert_eq!(q("SELECT id FROM range(-:s, :n, :s)").unwrap(), (-2, 9, 2));
        assert_eq!(q("SELECT id FROM range(?, ?)").unwrap(), (3, 7, 1));
        let e = q("SELECT id FROM range(:missing)").unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("UNBOUND_SQL_PARAMETER"));
        assert_eq!(e.sql_state.as_deref(), Some("42P02"));
        let e = q("SELECT id FROM range(?, ?, ?)").unwrap_err();
        assert_eq!(e.message_parameters["name"], "_2");
        // Without parameters a marker is unbound.
        let e = parse_sql("SELECT id FROM range(:n)", &no_views).unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("UNBOUND_SQL_PARAMETER"));
    }

    #[test]
    fn views_by_name() {
        let seven = Source::Range(range(0, 7, 1).unwrap());
        let views = |name: &str| (name == "lookup").then(|| seven.clone());
        // Names are case-insensitive; `range` without `(` is a name too.
        assert_eq!(
            parse_sql("SELECT * FROM Lookup;", &views)
                .unwrap()
                .row_count(),
            7
        );
        let e = parse_sql("SELECT * FROM range", &views).unwrap_err();
        assert_eq!(e.error_class.as_deref(), Some("TABLE_OR_VIEW_NOT_FOUND"));
        assert_eq!(e.message_parameters["relationName"], "`range`");
        let e = parse_sql("SELECT * FROM lookup x", &views).unwrap_err();
        assert_eq!(e.message_parameters["error"], "'x'");
        let e = parse_sql("SELECT id FROM lookup", &views).unwrap_err();
        assert_eq!(e.classes[0], "java.lang.UnsupportedOperationException");
    }

    #[test]
    fn row_counts() {
        let r = |s, e, st| range(s, e, st).unwrap().row_count();
        assert_eq!(r(0, 10, 1), 10);
        assert_eq!(r(0, 10, 3), 4);
        assert_eq!(r(10, 0, -3), 4);
        assert_eq!(r(5, 5, 1), 0);
        assert_eq!(r(i64::MIN, i64::MAX, 1), u64::MAX);
        assert!(range(0, 1, 0).is_err());
    }
}
