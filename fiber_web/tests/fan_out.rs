//! `fiber_web::fan_out` in handlers, through the test client (real guarded fibers):
//! children written without a type annotation, whose `?` takes an app's own refusal, a
//! path parameter's or a blocking call's failure, and whose join's `?` passes on a
//! child's own error, its panic, a deadline that passed before it started and a
//! cancelled scope, each as the response it is.

use std::time::{Duration, Instant};

use fiber_web::{fan_out, status, App, Problem, Request, Response};

#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

/// A lookup that fails the way an app's own code does: with a refusal of its own.
fn stock(item: &str) -> Result<u64, Response> {
    match item {
        "taken" => Err(Problem::new(status::CONFLICT, "taken", "that item is taken").into()),
        _ => Ok(item.len() as u64),
    }
}

/// `GET /sum/{a}/{b}`: both stocks and a blocking call's answer at once, summed.
fn sum(_: &(), req: &Request) -> Result<String, Response> {
    let total = fan_out::scope(|s| {
        let a = s.spawn(|| stock(&req.param::<String>("a")?));
        let b = s.spawn(|| Ok(stock(&req.param::<String>("b")?)? * 10));
        let c = s.spawn(|| Ok(fiber_pool::blocking(|| 100)?));
        Ok::<_, Response>(a.join()? + b.join()? + c.join()?)
    })?;
    Ok(total.to_string())
}

/// `GET /panics`: one child panics; its sibling's value is still read first.
fn panics(_: &(), _: &Request) -> Result<String, Response> {
    fan_out::scope(|s| {
        let fine = s.spawn(|| Ok(1));
        let broken = s.spawn(|| -> Result<u32, Response> { panic!("child bug") });
        assert_eq!(fine.join()?, 1);
        broken.join().map(|n| n.to_string())
    })
}

/// `GET /late`: a child spawned after the scope's deadline passed never starts.
fn late(_: &(), _: &Request) -> Result<String, Response> {
    fan_out::scope_with_deadline(Instant::now() + Duration::from_millis(20), |s| {
        fiber_pool::sleep(Duration::from_millis(60));
        s.spawn(|| Ok("ran")).join().map(String::from)
    })
}

/// `GET /cancelled`: after `cancel`, a child spawned into the scope never starts;
/// the request itself goes on and answers.
fn cancelled(_: &(), _: &Request) -> Result<String, Response> {
    let outcome = fan_out::scope(|s| {
        s.cancel();
        s.spawn(|| Ok("ran")).join()
    });
    let refused = outcome.expect_err("a child of a cancelled scope does not run");
    Ok(format!(
        "request goes on after a child's {}",
        refused.status
    ))
}

fn app() -> fiber_web::test::TestClient<()> {
    App::new(())
        .get("/sum/{a}/{b}", sum)
        .get("/panics", panics)
        .get("/late", late)
        .get("/cancelled", cancelled)
        .test_client()
}

#[test]
fn a_childs_question_marks_and_its_join_need_no_annotation() {
    let c = app();
    let r = c.get("/sum/ab/cde").send();
    assert_eq!((r.status, r.text().as_str()), (200, "132"));
}

#[test]
fn a_childs_own_error_is_the_handlers_answer() {
    let c = app();
    let r = c.get("/sum/ab/taken").send();
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("that item is taken"), "{}", r.text());
}

#[test]
fn a_childs_panic_is_a_500_without_the_panic_text() {
    let r = app().get("/panics").send();
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(!r.text().contains("child bug"), "{}", r.text());
}

#[test]
fn a_child_after_the_deadline_is_a_504_and_after_cancel_a_503() {
    let c = app();
    let r = c.get("/late").send();
    assert_eq!(r.status, 504, "{}", r.text());
    let r = c.get("/cancelled").send();
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "request goes on after a child's 503")
    );
}
