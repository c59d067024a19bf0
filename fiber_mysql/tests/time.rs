//! The `time` feature against a real MariaDB: DATETIME, TIMESTAMP, DATE and TIME bind
//! from the `time` crate's types (the server's own text of each value is checked, so a
//! round trip that is wrong both ways cannot pass) and read back into them over both
//! protocols, one by one and into a derived struct; a TIME past 24 hours reads as a
//! `Duration` and, into a time of day, fails naming the column and the type.
mod common;

use fiber_mysql::time::{Date, Duration, Month, PrimitiveDateTime, Time};
use fiber_mysql::{ColumnProblem, Conn, Error, FromRow, Queryable, RowExt};

#[derive(Debug, PartialEq, FromRow)]
struct Event {
    id: i64,
    at: PrimitiveDateTime,
    stamp: Option<PrimitiveDateTime>,
    day: Date,
    starts: Time,
    span: Duration,
}

fn leap_day_before_midnight() -> PrimitiveDateTime {
    let day = Date::from_calendar_date(2024, Month::February, 29).unwrap();
    PrimitiveDateTime::new(day, Time::from_hms_micro(23, 59, 58, 123_456).unwrap())
}

#[test]
fn date_and_time_columns_bind_and_read_as_time_types() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let table = common::unique_table("time");
    conn.query(&format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, at DATETIME(6) NOT NULL, \
         stamp TIMESTAMP(3) NULL, day DATE NOT NULL, starts TIME(6) NOT NULL, \
         span TIME NOT NULL)"
    ))
    .unwrap();
    let at = leap_day_before_midnight();
    let stamp = PrimitiveDateTime::new(
        Date::from_calendar_date(2001, Month::September, 9).unwrap(),
        Time::from_hms_milli(1, 46, 40, 250).unwrap(),
    );
    let day = Date::from_calendar_date(1969, Month::July, 20).unwrap();
    let starts = Time::from_hms_micro(9, 5, 0, 500).unwrap();
    let span = -(Duration::hours(27) + Duration::minutes(30) + Duration::seconds(15));
    let insert = format!("INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?)");
    conn.exec(&insert, (1, at, stamp, day, starts, span))
        .unwrap();
    conn.exec(
        &insert,
        (
            2,
            at,
            None::<PrimitiveDateTime>,
            day,
            starts,
            Duration::ZERO,
        ),
    )
    .unwrap();

    // What the server stored, in its own words.
    let text: (String, String, String, String, String) = conn
        .query_first(&format!(
            "SELECT CAST(at AS CHAR), CAST(stamp AS CHAR), CAST(day AS CHAR), \
             CAST(starts AS CHAR), CAST(span AS CHAR) FROM {table} WHERE id = 1"
        ))
        .unwrap()
        .unwrap();
    assert_eq!(
        text,
        (
            "2024-02-29 23:59:58.123456".to_string(),
            "2001-09-09 01:46:40.250".to_string(),
            "1969-07-20".to_string(),
            "09:05:00.000500".to_string(),
            "-27:30:15".to_string(),
        )
    );

    let expected = Event {
        id: 1,
        at,
        stamp: Some(stamp),
        day,
        starts,
        span,
    };
    let sql = format!("SELECT * FROM {table} ORDER BY id");
    let over_text: Vec<Event> = conn.query_as(&sql).unwrap();
    let over_binary: Vec<Event> = conn.exec_as(&sql, ()).unwrap();
    for events in [over_text, over_binary] {
        assert_eq!(events[0], expected);
        assert_eq!(events[1].stamp, None);
        assert_eq!(events[1].span, Duration::ZERO);
    }
    // Column by column, and as a parameter in a comparison.
    let row = &conn
        .exec(
            &format!("SELECT at, day FROM {table} WHERE at = ? AND id = 1"),
            (at,),
        )
        .unwrap()
        .rows[0];
    assert_eq!(row.try_get::<PrimitiveDateTime>("at").unwrap(), at);
    assert_eq!(row.try_get::<Date>(1).unwrap(), day);
}

#[test]
fn a_time_past_a_day_is_a_duration_not_a_time_of_day() {
    let mut conn = Conn::connect(&common::opts()).unwrap();
    let sql = "SELECT CAST('27:30:15' AS TIME) AS span, CAST('2024-02-30' AS DATE) AS bad_day, \
               CAST('-01:00:00' AS TIME) AS earlier";
    for result in [conn.query(sql).unwrap(), conn.exec(sql, ()).unwrap()] {
        let row = &result.rows[0];
        assert_eq!(
            row.try_get::<Duration>("span").unwrap(),
            Duration::hours(27) + Duration::minutes(30) + Duration::seconds(15)
        );
        // 27 hours is no time of day.
        let (column, rust_type, problem, message) =
            common::column_error(row.try_get::<Time>("span"));
        assert_eq!((&*column, &*rust_type), ("`span`", "Time"));
        assert_eq!(
            problem,
            ColumnProblem::WrongType {
                sql_type: "TIME".into()
            }
        );
        assert!(message.contains("`span` (TIME)"), "{message}");
        assert_eq!(
            row.try_get::<Duration>("earlier").unwrap(),
            -Duration::hours(1)
        );
        assert!(
            matches!(
                row.try_get::<Time>("earlier"),
                Err(Error::Column {
                    problem: ColumnProblem::WrongType { .. },
                    ..
                })
            ),
            "a negative TIME read as a time of day"
        );
        // An impossible date is NULL (with a warning) in MariaDB: a Date cannot hold it.
        match row.try_get::<Date>("bad_day") {
            Err(Error::Column {
                problem: ColumnProblem::Null,
                rust_type,
                ..
            }) => assert_eq!(rust_type, "Date"),
            other => panic!("an impossible date read as {other:?}"),
        }
    }
}
