"""The tests' own small games, served with selroll.EnvWorker.

copy   {"id", "type": "copy", "word": "amber", "choices": ["amber", "birch", ...]}
       say the word: actions "say <choice>" and "look"; the right word wins with reward 1
guess  {"id", "type": "guess", "secret": 3, "hi": 5}
       find the number: "guess 1" .. "guess <hi>" and "look"; a wrong guess reads higher/lower

A task without task_data, or of another type, cannot be played: reset raises (bad_task). The
action "explode" makes step raise (the tests' env_error). Every reset is appended to the file
named by the environment variable GAMES_LOG, when set, as one JSON line.
"""
import json
import os

import selroll


class Games(selroll.EnvWorker):
    kind = "games"

    def reset(self, task_id, task_data):
        if not isinstance(task_data, dict) or task_data.get("id") != task_id:
            raise LookupError("no task_data for task %r" % task_id)
        log = os.environ.get("GAMES_LOG")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"task": task_id, "task_data": task_data,
                                    "session": self.session, "seed": self.seed,
                                    "max_steps": self.max_steps, "pid": os.getpid()}) + "\n")
        self.data = task_data
        kind = task_data.get("type")
        if kind == "copy":
            word, choices = task_data["word"], task_data["choices"]
            self.actions = ["say %s" % c for c in choices] + ["look"]
            self.answer = "say %s" % word
            self.opening = "A parrot looks at you, waiting to hear the word '%s'." % word
            goal = "say the word %s." % word
        elif kind == "guess":
            hi = task_data["hi"]
            self.actions = ["guess %d" % i for i in range(1, hi + 1)] + ["look"]
            self.answer = "guess %d" % task_data["secret"]
            self.opening = "A sealed box shows a number between 1 and %d." % hi
            goal = "find the number between 1 and %d." % hi
        else:
            raise ValueError("no game of type %r" % kind)
        return self.opening, self.actions, {"goal": goal}

    def step(self, action):
        if action == "explode":
            raise RuntimeError("the game exploded")
        if action == self.answer:
            return "That is it. You win.", 1.0, True, True, []
        if action == "look":
            obs = self.opening
        elif action in self.actions and self.data["type"] == "guess":
            obs = "Higher." if int(action.split()[1]) < self.data["secret"] else "Lower."
        elif action in self.actions:
            obs = "The parrot tilts its head."
        else:
            obs = "Nothing happens."
        return obs, 0.0, False, False, self.actions
