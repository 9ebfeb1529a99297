"""``normedu``: run a course end to end (also ``python -m normedu``).

    normedu release [A ...] [--check]      solutions/ -> exercises/ (or check they agree)
    normedu collect A INBOX --lms canvas     an LMS download -> submitted/<student>/A/
    normedu autograde A [-j N] [--force]     grade every new or changed submission
    normedu gradescope A -o autograder.zip   the same grading as a Gradescope autograder
    normedu feedback A                       feedback/<student>/A/A.html, hidden tests hidden
    normedu export A [-o grades.csv]         one row per student, one column per test cell
    normedu export A --lms canvas -o F.csv   the scores in Canvas's gradebook-import format
    normedu report A [-o report.html]        the class's scores and mistakes, for the lecturer
    normedu students list|remove|merge       the roster; remove or merge ids (logged)
    normedu grade-bench [A]                  time a synthetic cohort: 1 worker vs all cores

Run from the course root (the folder with nbgrader_config.py) or pass --root.
Exit status: 0 on success, 1 when something needs the instructor's attention (release out of
sync, files that could not be placed, grading-machinery errors), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter


def _course(args):
    from .course.config import Course

    return Course.at(args.root)


def _cmd_release(args) -> int:
    from .course.release import check_release, release

    course = _course(args)
    names = args.assignments or course.assignments()
    if not names:
        print(f"no assignments in {course.root / course.source}")
        return 1
    if args.check:
        diffs = check_release(course, names)
        bad = {a: d for a, d in diffs.items() if d}
        for a in names:
            print(f"{a}: {'in sync' if not diffs[a] else 'OUT OF SYNC'}")
            for line in diffs[a]:
                print(f"  {line}")
        if bad:
            print("run `normedu release` to regenerate exercises/ from solutions/")
        return 1 if bad else 0
    for a in release(course, names):
        print(f"released {a}: {course.release}/{a}/")
    return 0


def _cmd_collect(args) -> int:
    from .course.collect import collect, read_mapping

    course = _course(args)
    mapping = read_mapping(args.map) if args.map else None
    items, unplaced = collect(
        course,
        args.assignment,
        args.inbox,
        layout=args.layout,
        pattern=args.pattern,
        mapping=mapping,
        lms=args.lms,
    )
    width = max([len(i.student) for i in items] + [7])
    print(f"{'student':<{width}}  action     handed in (UTC)                 file / notes")
    for i in items:
        notes = f"  [{'; '.join(i.notes)}]" if i.notes else ""
        late = "LATE" if i.late else ""
        when = f"{i.handed_in:<25} {late:<4}"
        print(f"{i.student:<{width}}  {i.action:<9}  {when}  {i.source}{notes}")
    counts = Counter(i.action for i in items)
    print(f"{len(items)} students: " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items())))
    warnings = [w for i in items for w in i.warnings]
    for line in warnings:
        print(f"WARNING: {line}")
    for line in unplaced:
        print(f"NOT PLACED: {line}")
    return 1 if unplaced or warnings else 0


def _cmd_autograde(args) -> int:
    from .course.autograde import autograde
    from .course.config import student_sort_key

    course = _course(args)
    report = autograde(
        course,
        args.assignment,
        jobs=args.jobs,
        force=args.force,
        students=args.student or None,
        cell_timeout=args.cell_timeout,
        wall_timeout=args.timeout,
        memory_mb=args.memory_mb,
        landlock=args.landlock,
        allow_network=args.allow_network,
        progress=not args.quiet,
    )
    width = max([len(s) for s in report.verdicts] + [7])
    for student, v in sorted(report.verdicts.items(), key=lambda kv: student_sort_key(kv[0])):
        flag = " [tampered]" if v.tampered else ""
        notes = f"  {'; '.join(v.notes)}" if v.notes else ""
        print(f"{student:<{width}}  {v.status}{flag}{notes}")
    counts = Counter(v.status for v in report.verdicts.values())
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing new"
    print(
        f"{args.assignment}: graded {len(report.graded)} ({summary}); "
        f"{len(report.skipped)} unchanged, not re-graded; {report.seconds:.1f} s with "
        f"{report.jobs} worker(s); sandbox: {report.sandbox}"
    )
    for error in report.errors:
        print(f"ERROR: {error}", file=sys.stderr)
    return 1 if report.errors else 0


def _cmd_gradescope(args) -> int:
    from .course.gradescope import build_autograder

    path, opts, torch = build_autograder(
        _course(args),
        args.assignment,
        args.output,
        hidden_visibility=args.hidden_visibility,
        cell_timeout=args.cell_timeout,
        wall_timeout=args.timeout,
        memory_mb=args.memory_mb,
        allow_network=args.allow_network,
    )
    print(
        f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): upload it as the autograder of a "
        f"Gradescope programming assignment; students submit {opts.notebook}.ipynb. "
        f"setup.sh installs {'torch (CPU) and ' if torch else ''}the course's wheel; hidden "
        f"tests are shown {opts.hidden_visibility}. The zip holds the solution: keep it private."
    )
    return 0


def _cmd_adjust(args) -> int:
    from .course.adjust import adjust, describe

    course = _course(args)
    record = adjust(course, args.assignment, args.student, args.test, args.score, args.reason)
    print(f"{args.student}: {describe(record)}")
    return 0


def _cmd_feedback(args) -> int:
    from .course.feedback import write_feedback

    course = _course(args)
    report = write_feedback(course, args.assignment, students=args.student or None)
    for student in report.written:
        print(f"{student}: wrote {report.pages[student].relative_to(course.root)}")
    unchanged = len(report.pages) - len(report.written)
    print(
        f"{len(report.pages)} feedback pages: {len(report.written)} written, {unchanged} unchanged"
    )
    return 0


def _cmd_export(args) -> int:
    from .course.export import review_summary, rows, to_csv

    course = _course(args)
    text = to_csv(course, args.assignment, args.output, lms=args.lms, canvas_id=args.canvas_id)
    if args.output:
        extra = 2 if args.lms else 1  # the header (and Canvas's Points Possible row)
        print(f"wrote {args.output} ({text.count(chr(10)) - extra} students)")
    else:
        sys.stdout.write(text)
    # The summary goes to stderr when the CSV goes to stdout: a redirected CSV stays clean.
    summary = review_summary(rows(course, args.assignment)[1])
    print(summary, file=sys.stdout if args.output else sys.stderr)
    return 0


def _cmd_report(args) -> int:
    from .course.report_html import write_report

    output = args.output or f"{args.assignment}-report.html"
    report = write_report(_course(args), args.assignment, output)
    unnamed = report.unnamed.count if report.unnamed else 0
    flagged = ", ".join(f"{len(who)} {name}" for name, who in report.flags.items() if who)
    print(
        f"wrote {output}: {len(report.graded)} graded hand-ins of {report.students} students, "
        f"{len(report.causes)} named causes, {unnamed} students with a failure no cause names"
        + (f"; flags: {flagged}" if flagged else "")
    )
    return 0


def _cmd_students(args) -> int:
    import json

    from .course import students

    course = _course(args)
    if args.action == "list":
        known = students.roster(course)
        width = max([len(s) for s in known] + [7])
        print(f"{'student':<{width}}  {'LMS id':<10}  name / assignments")
        for s, info in sorted(known.items(), key=lambda kv: kv[0].casefold()):
            where = ", ".join(info["assignments"])
            print(f"{s:<{width}}  {info['lms_user_id']:<10}  {info['name']} / {where}")
        for entry in students.history(course):
            shown = {k: v for k, v in entry.items() if k != "collect_records"}
            print(f"log: {json.dumps(shown, sort_keys=True)}")
        return 0
    if args.action == "remove":
        if len(args.ids) != 1:
            raise ValueError("usage: normedu students remove STUDENT [--assignment A]")
        entry = students.remove(course, args.ids[0], args.assignment, args.reason)
        print(
            f"removed {entry['student']} from {', '.join(entry['assignments'])}; hand-ins kept "
            f"in {entry['kept_in']}; logged in {students.log_path(course).relative_to(course.root)}"
        )
        return 0
    if len(args.ids) != 2:
        raise ValueError("usage: normedu students merge OLD NEW")
    entry = students.merge(course, *args.ids, reason=args.reason)
    kept = ", ".join(f"{a}: kept {who}'s hand-in" for a, who in entry["kept"].items())
    print(
        f"merged {entry['student']} into {entry['into']} ({kept}); the rest is in "
        f"{entry['kept_in']}; logged in {students.log_path(course).relative_to(course.root)}. "
        "Run `normedu autograde` to grade the merged submissions."
    )
    return 0


def _cmd_bench(args) -> int:
    from .course.grading_bench import run_bench, save

    course = _course(args) if args.assignment != "demo" else None
    mix = None
    if args.students:
        from .course.cohort import DEFAULT_MIX

        scale = args.students / sum(DEFAULT_MIX.values())
        mix = {k: max(1, round(v * scale)) for k, v in DEFAULT_MIX.items()}
    result = run_bench(
        args.assignment, course=course, jobs=args.jobs, mix=mix, cell_timeout=args.cell_timeout
    )
    print(result.table())
    if args.save:
        print(f"saved {save(result)}")
    return 0 if result.identical else 1


def build_parser() -> argparse.ArgumentParser:
    from .course.autograde import CELL_TIMEOUT_S, MEMORY_MB, WALL_TIMEOUT_S
    from .course.gradescope import VISIBILITIES

    parser = argparse.ArgumentParser(
        prog="normedu",
        description="Run a normedu assignment end to end: "
        "release, collect, autograde, feedback, export.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Each subcommand has its own --help. Guide: book/instructor_guide.md",
    )
    parser.add_argument(
        "--root",
        help="course root (default: $NORMEDU_COURSE_ROOT, else the nearest folder at or above "
        "the current one with nbgrader_config.py)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("release", help="regenerate exercises/ from solutions/ (or --check)")
    p.add_argument(
        "assignments", nargs="*", metavar="ASSIGNMENT", help="default: every folder of solutions/"
    )
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when out of sync")
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser(
        "collect",
        help="place an LMS download as nbgrader submissions",
        description="Copy every file of INBOX to submitted/<student>/ASSIGNMENT/ASSIGNMENT.ipynb. "
        "Corrupt files are kept too: autograde reports them.",
    )
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("inbox", metavar="INBOX", help="folder of handed-in files")
    p.add_argument(
        "--layout",
        choices=("flat", "folders"),
        default="flat",
        help="flat: INBOX/<student>.ipynb (default); folders: INBOX/<student>/<any file>",
    )
    p.add_argument(
        "--pattern",
        help="regex on the path relative to INBOX with a (?P<student>...) group (and an "
        "optional (?P<user_id>...) group), for an LMS without --lms, e.g. Moodle: "
        r"'^(?P<student>[^_/]+)_(?P<user_id>\d+)_assignsubmission_file_/'; overrides --layout",
    )
    p.add_argument(
        "--lms",
        choices=("canvas",),
        help="read the LMS's download names: canvas: <name>[_LATE]_<user id>_<submission id>_"
        "<file> (keeps the late flag and user ID; the newest resubmission -1, -2 wins); "
        "overrides --layout and --pattern",
    )
    p.add_argument(
        "--map",
        metavar="FILE",
        help="CSV of lines 'file,student' naming the student of a file (path in INBOX or file "
        "name); needed when two different hand-ins map to one student id",
    )
    p.set_defaults(func=_cmd_collect)

    p = sub.add_parser(
        "autograde",
        help="grade new and changed submissions, in parallel and sandboxed",
        description="Grade every submission of ASSIGNMENT not graded yet (or changed since). "
        "Each runs in its own sandboxed kernel; see the instructor guide for the isolation "
        "and its limits.",
    )
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument(
        "-j", "--jobs", type=int, default=None, help="parallel workers (default: CPU count)"
    )
    p.add_argument("--force", action="store_true", help="re-grade every submission")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=CELL_TIMEOUT_S,
        help="seconds per cell (default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=WALL_TIMEOUT_S,
        help="seconds per submission (default %(default)s)",
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        default=MEMORY_MB,
        help="kernel address-space cap, 0: none (default %(default)s)",
    )
    p.add_argument(
        "--landlock",
        choices=("auto", "on", "off"),
        default="auto",
        help="file-system sandbox (default auto)",
    )
    p.add_argument(
        "--allow-network",
        action="store_true",
        help="grade even where the system gives kernels no network namespace of their own "
        "(student code then reaches the network; without it autograde stops there)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_autograde)

    p = sub.add_parser(
        "gradescope",
        help="build a Gradescope autograder zip that grades as autograde does",
        description="Write Gradescope's autograder zip of ASSIGNMENT (setup.sh, run_autograder, "
        "the course's wheel, the assignment and its gradebook). On Gradescope each submission "
        "is graded by `normedu autograde` itself: same checks, sandbox and messages; one "
        "Gradescope test per graded cell. The zip holds the solution and hidden tests: keep it "
        "private. See the instructor guide, section Gradescope.",
    )
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument(
        "-o", "--output", default="autograder.zip", help="zip to write (default %(default)s)"
    )
    p.add_argument(
        "--hidden-visibility",
        choices=VISIBILITIES,
        default="after_published",
        help="when students see the hidden tests' results (Gradescope's visibility; default "
        "%(default)s: once you publish the grades); visible tests are always shown",
    )
    for flag, kind, default, what in (
        ("--cell-timeout", float, CELL_TIMEOUT_S, "seconds per cell"),
        ("--timeout", float, WALL_TIMEOUT_S, "seconds per submission, under Gradescope's limit"),
        ("--memory-mb", int, MEMORY_MB, "kernel address-space cap, 0: none"),
    ):
        p.add_argument(flag, type=kind, default=default, help=what + " (default %(default)s)")
    p.add_argument(
        "--allow-network",
        action="store_true",
        help="grade even where Gradescope's container gives kernels no network namespace",
    )
    p.set_defaults(func=_cmd_gradescope)

    p = sub.add_parser(
        "adjust",
        help="override one student's score on one test cell, with a reason",
        description="Set STUDENT's score on test cell TEST (its grade_id, a CSV column) to "
        "SCORE points. The score is nbgrader's manual score of that cell (what Formgrader's "
        "manual grading writes); the reason reaches the CSV's notes.",
    )
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("student", metavar="STUDENT")
    p.add_argument("test", metavar="TEST")
    p.add_argument("score", metavar="SCORE", type=float)
    p.add_argument("--reason", required=True, help="why (kept in the CSV's notes)")
    p.set_defaults(func=_cmd_adjust)

    p = sub.add_parser("feedback", help="per-student feedback HTML (hidden tests stay hidden)")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("--student", action="append", help="only this student (repeatable)")
    p.set_defaults(func=_cmd_feedback)

    p = sub.add_parser("export", help="grades as CSV: status, tampered, score, one column per test")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("-o", "--output", help="CSV file (default: standard output)")
    p.add_argument(
        "--lms",
        choices=("canvas",),
        help="canvas: Canvas's gradebook-import CSV (Student, ID, SIS User ID, SIS Login ID, "
        "Section, then the assignment's total score), matched on the Canvas user ID",
    )
    p.add_argument(
        "--canvas-id",
        metavar="ID",
        help="the Canvas assignment's id (from its URL .../assignments/ID): the column is then "
        "'ASSIGNMENT (ID)' and fills that assignment; without it Canvas creates a new one",
    )
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser(
        "report",
        help="one HTML page for the lecturer: scores, test cells passed, mistakes by cause, flags",
        description="After autograde: the score distribution, each test cell's pass share, the "
        "mistakes the class made by the cause the grader named (students, share, the message "
        "they saw; failures that name no cause counted apart), and the flags (late, needs "
        "review, tampered, timed out, grading failed) with their students. One self-contained "
        "file: figures embedded, no script, opens offline.",
    )
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument(
        "-o", "--output", help="HTML file to write (default: ASSIGNMENT-report.html, here)"
    )
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser(
        "students",
        help="list the roster; remove or merge student ids (logged in .normedu/students.log)",
        description="list: every student id, name, LMS id and assignments, then the log. "
        "remove STUDENT: take an id out of every stage (hand-ins moved to .normedu/removed/). "
        "merge OLD NEW: OLD's hand-ins become NEW's (the later hand-in wins where both handed "
        "in), OLD is removed. Both are logged in .normedu/students.log.",
    )
    p.add_argument("action", choices=("list", "remove", "merge"))
    p.add_argument("ids", nargs="*", metavar="STUDENT")
    p.add_argument("--assignment", help="remove: only from this assignment")
    p.add_argument("--reason", default="", help="why (kept in the log)")
    p.set_defaults(func=_cmd_students)

    p = sub.add_parser(
        "grade-bench",
        help="benchmark: grade a synthetic cohort sequentially and in parallel",
        description="Writes a synthetic cohort (40 students by default, a realistic mix of "
        "correct, "
        "wrong and broken notebooks) in a scratch course, grades it with 1 worker and with N, and "
        "prints seconds per submission and the speed-up.",
    )
    p.add_argument(
        "assignment",
        nargs="?",
        default="demo",
        help="an assignment of solutions/, or 'demo' (default)",
    )
    p.add_argument(
        "-j", "--jobs", type=int, default=None, help="parallel workers (default: CPU count)"
    )
    p.add_argument("--students", type=int, default=None, help="cohort size (default 40)")
    p.add_argument(
        "--cell-timeout", type=float, default=20.0, help="seconds per cell (default %(default)s)"
    )
    p.add_argument(
        "--save", action="store_true", help="store the figures in results/cpu/grade_bench.json"
    )
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"normedu {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
