//! A built app's answers in the framework's own words: the renderer that turns a
//! [`Problem`] into the response a client reads (the app's, or the default's JSON or
//! text by `Accept`), the request ids every response and problem carries, and the
//! headers every response carries.
//!
//! Both run on the connection's coroutine, as a response leaves the router or as the
//! connection refuses a request it could not read: never on a fiber, so an app's
//! renderer cannot overflow one.

use std::borrow::Cow;
use std::sync::Arc;

use crate::http::{Problem, Request, Response};
use crate::request_id::RequestId;

/// An app's own rendering of the framework's problems (`App::render_problems`).
pub(crate) type Renderer = Arc<dyn Fn(&Problem) -> Response + Send + Sync>;

/// How a built app answers with problems and ids.
#[derive(Clone, Default)]
pub(crate) struct Answers {
    pub(crate) render: Option<Renderer>,
    pub(crate) ids: Option<Arc<RequestId>>,
    /// Headers on every response (`App::default_header`), written by the connection
    /// from this one list.
    pub(crate) default_headers: crate::http::defaults::DefaultHeaders,
}

impl Answers {
    /// Give `req` its id, when the app gives ids.
    pub(crate) fn begin(&self, req: &mut Request) {
        if let Some(ids) = &self.ids {
            ids.assign(req);
        }
    }

    /// `resp` as it leaves for `req`'s client: a problem rendered, the id added.
    pub(crate) fn finish(&self, resp: &mut Response, req: &Request) {
        if resp.problem.is_some() {
            self.render_in_place(resp, req.request_id(), req.wants_json());
        }
        if let (Some(ids), Some(id)) = (&self.ids, req.request_id()) {
            if !resp.sets_header(ids.name()) {
                resp.headers
                    .to_mut()
                    .push((ids.name(), Cow::Owned(id.to_string())));
            }
        }
    }

    /// The header ids are sent in, when the app gives them.
    pub(crate) fn id_header(&self) -> Option<&'static str> {
        self.ids.as_ref().map(|ids| ids.name())
    }

    /// The answer (a problem) to a request the connection refused before routing it: `sent_id`
    /// and `wants_json` are what its head (parsed or not) said.
    pub(crate) fn refusal(
        &self,
        mut resp: Response,
        sent_id: Option<&str>,
        wants_json: bool,
    ) -> Response {
        let id = self.ids.as_ref().map(|ids| ids.for_sent(sent_id));
        self.render_in_place(&mut resp, id.as_deref(), wants_json);
        match (&self.ids, id) {
            (Some(ids), Some(id)) => resp.header(ids.name(), id),
            _ => resp,
        }
    }

    /// Replace `resp`, a problem, by its rendering: the app's renderer, or the
    /// default. The headers `resp` carried (`Allow`, `Retry-After`, a layer's) stay,
    /// but its content type; the problem stays attached for the 5xx log line.
    fn render_in_place(&self, resp: &mut Response, id: Option<&str>, wants_json: bool) {
        let Some(mut problem) = resp.problem.take() else {
            return;
        };
        problem.set_status(resp.status);
        problem.set_request(id, wants_json);
        let mut out = match &self.render {
            Some(render) => render(&problem),
            None => problem.to_response(),
        };
        let rendered = out.headers.len();
        for (name, value) in resp.headers.iter() {
            let set_by_render = out.headers[..rendered]
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name));
            if !name.eq_ignore_ascii_case("content-type") && !set_by_render {
                out.headers.to_mut().push((name, value.clone()));
            }
        }
        out.problem = Some(problem);
        *resp = out;
    }
}
