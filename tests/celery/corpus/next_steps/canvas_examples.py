# The Canvas guide's examples ("Canvas: Designing Work-flows"), on the Next Steps tasks.
# Each function returns what the guide says the example gives.
import contextlib

from pgtasks.celery import chain, chord, group, signature

from proj.tasks import add, mul, xsum


def partials():
    partial = add.s(2)
    return partial.delay(4).get()  # 6


def a_signature_by_name():
    return signature("proj.tasks.add", args=(2, 2), countdown=1).delay().get()  # 4


def simple_chain():
    return chain(add.s(2, 2), add.s(4), add.s(8))().get()  # 16


def piped_chain():
    return (add.s(4, 4) | mul.s(8) | mul.s(10))().get()  # 640


def immutable_chain():
    res = (add.si(2, 2) | add.si(4, 4) | add.si(8, 8))()
    return [res.get(), res.parent.get(), res.parent.parent.get()]  # [16, 8, 4]


def a_group():
    return group(add.s(i, i) for i in range(10))().get()


def group_results():
    res = group(add.s(2, 2), add.s(4, 4))()
    values = res.get()
    return [values, res.ready(), res.successful(), res.completed_count()]


def a_chord():
    return chord(add.s(i, i) for i in range(10))(xsum.s()).get()  # 90


def chord_with_body():
    return chord((add.s(i, i) for i in range(10)), xsum.s())().get()  # 90


def group_piped_to_task():
    return (group(add.s(i, i) for i in range(10)) | xsum.s())().get()  # 90


def chain_of_chords():
    c1 = chord([add.si(1, 1), add.si(2, 2)], xsum.s())
    return (add.si(0, 0) | c1 | mul.s(10))().get()  # 60


def a_map():
    return ~xsum.map([list(range(10)), list(range(100))])  # [45, 4950]


def a_starmap():
    return ~add.starmap(zip(range(10), range(10)))


def a_chunks():
    return add.chunks(zip(range(20), range(20)), 5)().get()


def an_error_callback():
    # The guide's add.s(2, 2).on_error(log_error.s()), with arguments that fail.
    from proj.errors import log_error

    result = add.apply_async(("2", 2), link_error=log_error.s())
    with contextlib.suppress(TypeError):
        result.get()
    return result.id
