"""Running the course: release, collect, autograde, feedback, export (``normedu`` CLI).

Modules, one stage each (import the one you need; nothing here imports torch):

- :mod:`.config`    the course directory layout and nbgrader's configuration
- :mod:`.release`   solutions/ -> exercises/, and the in-sync check
- :mod:`.collect`   an LMS download -> submitted/<student>/<a>/
- :mod:`.lms`       Canvas's download names and its gradebook-import CSV
- :mod:`.students`  the roster: names into the gradebook, remove / merge (logged)
- :mod:`.checks`    corrupt / wrong-assignment / tampered submissions, before anything runs
- :mod:`.sandbox`   the kernel's sandbox (working copy, rlimits, Landlock)
- :mod:`.reach`     what a grading kernel can reach: no reference, no library's norm
- :mod:`.policy`    magics and shell lines skipped while grading; notes for review
- :mod:`.kernel_manager` the kernel manager that starts (or forks) a kernel in the sandbox
- :mod:`.worker`    executes submissions in the sandbox (long-lived worker processes)
- :mod:`.pool`      the worker pool of the parent
- :mod:`.gradebook` scores, forgetting a submission, manual scores of a resubmission, the
  gradebook's working copy
- :mod:`.nbgrader_bridge` nbgrader's preprocessors of this course (replay, feedback tracebacks)
- :mod:`.autograde` the parallel grading pipeline; nbgrader records the results
- :mod:`.status`    per-submission verdicts (status column of the export)
- :mod:`.diagnose`  "syntax error in `f` (line N)" / "ValueError in `f`" from a graded notebook
- :mod:`.feedback`  per-student HTML with hidden tests hidden
- :mod:`.export`    the CSV
- :mod:`.cohort`    the demo assignment and synthetic cohorts
- :mod:`.grading_bench` the grading benchmark (`normedu grade-bench`)
"""
