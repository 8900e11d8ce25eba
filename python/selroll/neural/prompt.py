"""The neural agent's prompt: the actor renders prompt.tmpl (docs/prompt.md's template language)
and sends the messages; the server turns messages into text with chat_text; pretraining renders
each demonstration step with render_step, which writes what the actor's renderer writes for this
template (tests/test_neural_prompt.py checks the two against a request the real actor sent)."""
import os

TEMPLATE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompt.tmpl")
HISTORY = 2


def render_user(goal, history, current_obs, admissible, h=HISTORY):
    """history: [(obs, action), ...] of all previous steps (the last h are shown)."""
    shown = history[len(history) - min(h, len(history)):] if h > 0 else []
    n_prev = len(history)
    out = [goal, "\n"]
    if shown:
        lines = []
        for j, (o, a) in enumerate(shown):
            k = n_prev - len(shown) + j + 1
            lines.append("[Observation %d: '%s', Action %d: '%s']" % (k, o, k, a))
        out.append("\n".join(lines))
        out.append("\n")
    out.append(current_obs)
    out.append("\n")
    out.append("[" + ", ".join("'%s'" % a for a in admissible if a != "help") + "]")
    return "".join(out)


def chat_text(messages):
    """The model's text of a chat: each message as <|role|>, a line break, its content and a line
    break; then <|assistant|> and a line break, where the answer starts."""
    parts = []
    for m in messages:
        parts.append("<|%s|>\n%s\n" % (m["role"], m["content"]))
    parts.append("<|assistant|>\n")
    return "".join(parts)


def answer_text(action):
    return "<action>%s</action>" % action
