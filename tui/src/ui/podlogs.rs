//! The pod logs view: the migration's pods in a row (the chosen one highlighted), the chosen
//! container and what became of its stream, then its log wrapped at the screen's width.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use super::{Theme, scrolled};
use crate::{
    state::{
        ObjKey, State,
        podlogs::{self, Stream},
    },
    strings::{podlogs as say, view},
};

/// Draws the pod logs view of `key`.
pub fn draw(frame: &mut Frame, state: &State, t: &Theme, area: Rect, key: &ObjKey) {
    let heading = (say::heading(&key.name), key);
    let Some(logs) = state.podlogs.as_ref().filter(|l| l.key == *key) else {
        scrolled::draw(
            frame,
            state,
            t,
            area,
            heading,
            scrolled::Body::Gone(view::OBJECT_GONE),
        );
        return;
    };
    let mut head = vec![];
    match &logs.pods {
        None => head.push(Line::styled(format!(" {}", say::LISTING), t.dim())),
        Some(Err(why)) => head.push(Line::styled(format!(" {}", say::cannot_list(why)), t.bad())),
        Some(Ok(pods)) if pods.is_empty() => {
            head.push(Line::styled(format!(" {}", say::NO_PODS), t.dim()));
        }
        Some(Ok(pods)) => {
            // Only the chosen pod, whole: a pod's name is long, and Tab shows the next.
            if let Some(p) = pods.get(logs.selected) {
                head.push(Line::from(vec![
                    Span::styled(
                        format!(" {}", say::count(logs.selected + 1, pods.len())),
                        t.dim(),
                    ),
                    Span::styled(say::pod(&p.name, &p.phase), t.title()),
                    Span::styled(say::made_by(&p.owner), t.dim()),
                ]));
            }
        }
    }
    if let Some(pod) = logs.pod() {
        let container = pod.containers.first().map_or("", String::as_str);
        let (what, style) = match &logs.stream {
            Stream::Idle => (say::IDLE.to_owned(), t.dim()),
            Stream::Opening => (say::OPENING.to_owned(), t.dim()),
            Stream::Following => (say::FOLLOWING.to_owned(), t.ok()),
            Stream::Ended => (say::ENDED.to_owned(), t.warn()),
            Stream::Failed(_) => (say::FAILED.to_owned(), t.bad()),
        };
        head.push(Line::from(vec![
            Span::styled(format!(" {}", say::container(container)), t.dim()),
            Span::styled(what, style),
        ]));
    }
    let width = usize::from(area.width).max(1);
    let mut lines: Vec<Line> = vec![];
    if logs.dropped > 0 {
        lines.push(Line::styled(say::dropped(logs.dropped), t.dim()));
    }
    let failed = match &logs.stream {
        Stream::Failed(why) => Some(why),
        _ => None,
    };
    if logs.lines.is_empty() && logs.pod().is_some() && failed.is_none() {
        lines.push(Line::styled(say::EMPTY, t.dim()));
    }
    for l in &logs.lines {
        lines.extend(podlogs::wrap(l, width).into_iter().map(Line::raw));
    }
    // Why it cannot be read, whole, after the lines it gave (the API server's or kubelet's
    // words can be long: a 403's names the role that grants the right).
    if let Some(why) = failed {
        lines.extend(
            podlogs::wrap(why, width)
                .into_iter()
                .map(|l| Line::styled(l, t.bad())),
        );
    }
    let scroll = if logs.tail { usize::MAX } else { state.scroll };
    scrolled::draw_headed(frame, t, area, heading, head, lines, scroll);
}
