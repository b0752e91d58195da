"""Synthetic gsm8k-style arithmetic word problems with exact answers.

A problem is a start sentence (a count, or groups of a count for a product), zero or
more further operations (add, subtract; a share-out division only last) and a question.
The answer shows one line of working per operation, then "#### <number>", as gsm8k's
answers end. Every number (inputs, intermediate results, answer) is below 1000.

The working is done on paper, one digit column at a time, so that every token the model
writes depends on a few nearby ones (a small model cannot learn to carry across a
whole number in one step):

    385 + 47: units 5 + 7 = 12, tens 8 + 4 + 1 = 13, hundreds 3 + 0 + 1 = 4, so 385 + 47 = 432
    385 - 47: units 15 - 7 = 8, tens 8 - 4 - 1 = 3, hundreds 3 - 0 = 3, so 385 - 47 = 338
    86 * 4: units 6 * 4 = 24, tens 8 * 4 + 2 = 34, so 86 * 4 = 344
    344 / 8: hundreds 3 / 8 = 0 remainder 3, tens 34 / 8 = 4 remainder 2, units 24 / 8 = 3 remainder 0, so 344 / 8 = 43

Addition, subtraction and multiplication go from the units up, carrying (or borrowing,
shown as the 1 written before the top digit) into the next column; a product always
has its one-digit factor second; division is long division from the hundreds down.
"""
import random

NAMES = [("Tom", "he", "him"), ("Anna", "she", "her"), ("Sam", "he", "him"),
         ("Lily", "she", "her"), ("Ben", "he", "him"), ("Mia", "she", "her"),
         ("Jack", "he", "him"), ("Emma", "she", "her"), ("Leo", "he", "him"),
         ("Zoe", "she", "her"), ("Max", "he", "him"), ("Eva", "she", "her")]
ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "coins", "cards",
         "shells", "eggs", "flowers", "toys"]
CONTAINERS = [("box", "boxes"), ("bag", "bags"), ("pack", "packs"), ("basket", "baskets"),
              ("jar", "jars")]
FRIENDS = ["friends", "children", "classmates", "cousins"]

MAX = 999


def draw_number(rng, lo=1, hi=MAX):
    """A number in [lo, hi], its digit count drawn first so short and long numbers mix."""
    lo, hi = max(lo, 0), min(hi, MAX)
    if lo > hi:
        return None
    digits = rng.choice([d for d in (1, 2, 3) if 10 ** (d - 1) <= hi and 10 ** d - 1 >= lo] or [1])
    a, b = max(lo, 10 ** (digits - 1) if digits > 1 else 0), min(hi, 10 ** digits - 1)
    if a > b:
        return rng.randint(lo, hi)
    return rng.randint(a, b)


def cap(s):
    return s[0].upper() + s[1:]


class Problem:
    def __init__(self, question, steps, answer):
        self.question = question  # the question text, without "Question: "
        self.steps = steps        # [(a, op, b, result)]
        self.answer = answer

    def working(self):
        return "\n".join(step_working(a, op, b) for a, op, b, _ in self.steps)

    def answer_text(self):
        """gsm8k's answer field: the working, then '#### N'."""
        return f"{self.working()}\n#### {self.answer}"


PLACES = ["units", "tens", "hundreds"]


def digits_up(n):
    """The digits of n from the units up."""
    return [int(c) for c in reversed(str(n))]


def add_columns(a, b):
    cols, carry = [], 0
    da, db = digits_up(a), digits_up(b)
    for i in range(max(len(da), len(db))):
        x, y = (da[i] if i < len(da) else 0), (db[i] if i < len(db) else 0)
        s = x + y + carry
        cols.append(f"{PLACES[i]} {x} + {y}{' + 1' if carry else ''} = {s}")
        carry = s // 10
    return cols


def sub_columns(a, b):
    """a >= b; a borrow shows as the 1 written before the top digit."""
    cols, borrow = [], 0
    da, db = digits_up(a), digits_up(b)
    for i, x in enumerate(da):
        y = db[i] if i < len(db) else 0
        d = x - y - borrow
        top = x + 10 if d < 0 else x
        cols.append(f"{PLACES[i]} {top} - {y}{' - 1' if borrow else ''} = {d % 10}")
        borrow = 1 if d < 0 else 0
    return cols


def mul_columns(a, m):
    """m is one digit."""
    cols, carry = [], 0
    for i, x in enumerate(digits_up(a)):
        p = x * m + carry
        cols.append(f"{PLACES[i]} {x} * {m}{f' + {carry}' if carry else ''} = {p}")
        carry = p // 10
    return cols


def div_columns(a, d):
    """Long division by the one-digit d, from the top digit down."""
    cols, rem = [], 0
    top = len(str(a)) - 1
    for i, c in enumerate(str(a)):
        cur = rem * 10 + int(c)
        q, rem = divmod(cur, d)
        cols.append(f"{PLACES[top - i]} {cur} / {d} = {q} remainder {rem}")
    return cols


def step_working(a, op, b):
    """One line of working: the operation, its columns, the result."""
    if op == "*" and a < 10 <= b:
        a, b = b, a  # the one-digit factor second
    cols = {"+": add_columns, "-": sub_columns, "*": mul_columns, "/": div_columns}[op](a, b)
    r = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    return f"{a} {op} {b}: {', '.join(cols)}, so {a} {op} {b} = {r}"


# How hard the products and quotients may be: the larger factor of a product and a
# quotient stay at or below these (train.py --mul-max / --div-max set them).
LIMITS = {"mul_max": MAX, "div_max": MAX}


def make_problem(rng, n_ops=None, pools=None):
    """One problem with 1 or 2 operations; names, items, containers and friends from
    the fixed lists, or drawn by `pools` (a Pools)."""
    while True:
        p = _try_problem(rng, n_ops if n_ops is not None else rng.choice((1, 2)), pools)
        if p is not None:
            return p


def _try_problem(rng, n_ops, pools=None):
    if pools is None:  # the fixed lists (tasks/arith/test.jsonl, fewshot.jsonl, the tokenizer)
        name, he, him = rng.choice(NAMES)
        other = rng.choice([n for n in NAMES if n[0] != name])[0]
        item = rng.choice(ITEMS)
        container = lambda: rng.choice(CONTAINERS)  # noqa: E731
        friend = lambda: rng.choice(FRIENDS)  # noqa: E731
    else:
        name, he, him = pools.name(rng)
        other = pools.name(rng)[0]
        while other == name:
            other = pools.name(rng)[0]
        item = pools.item(rng)
        container = lambda: pools.container(rng)  # noqa: E731
        friend = lambda: pools.friends(rng)  # noqa: E731
    sentences, steps = [], []
    ops = []
    # First: a product start (counts one operation) or a plain count.
    if rng.random() < 0.3:
        small = rng.randint(2, 9)
        big = draw_number(rng, 2, min(MAX // small, LIMITS["mul_max"]))
        if rng.random() < 0.5:
            a, b = small, big
        else:
            a, b = big, small
        one, many = container()
        v = a * b
        form = rng.randrange(3)
        if form == 0:
            sentences.append(f"{name} buys {a} {many} of {item}. Each {one} has {b} {item}.")
        elif form == 1:
            sentences.append(f"{name} has {a} {many} with {b} {item} in each {one}.")
        else:
            sentences.append(f"There are {a} {many}. {name} puts {b} {item} in each {one}.")
        steps.append((a, "*", b, v))
        ops.append("mul")
    else:
        v = draw_number(rng, 1, MAX)
        form = rng.randrange(3)
        if form == 0:
            sentences.append(f"{name} has {v} {item}.")
        elif form == 1:
            sentences.append(f"{name} starts with {v} {item}.")
        else:
            sentences.append(f"There are {v} {item} in {name}'s room.")
    while len(steps) < n_ops:
        last = len(steps) == n_ops - 1
        choices = ["add", "sub"] + (["div"] if last and v >= 2 else [])
        op = rng.choice(choices)
        if op == "add":
            if v >= MAX:
                return None
            b = draw_number(rng, 1, MAX - v)
            r = v + b
            form = rng.randrange(4)
            s = [f"{cap(he)} buys {b} more {item}.",
                 f"{other} gives {him} {b} more {item}.",
                 f"Then {he} finds {b} more.",
                 f"{cap(he)} gets {b} more {item} from {other}."][form]
            steps.append((v, "+", b, r))
        elif op == "sub":
            if v < 2:
                return None
            b = draw_number(rng, 1, v - 1)
            r = v - b
            form = rng.randrange(4)
            s = [f"{cap(he)} gives {b} {item} to {other}.",
                 f"{cap(he)} loses {b} of them.",
                 f"Then {he} sells {b} {item}.",
                 f"{other} takes {b} {item} from {him}."][form]
            steps.append((v, "-", b, r))
        else:
            divisors = [d for d in range(2, 10) if v % d == 0 and v // d <= LIMITS["div_max"]]
            if not divisors:
                return None
            b = rng.choice(divisors)
            r = v // b
            friends = friend()
            s = rng.choice([f"{cap(he)} shares them equally among {b} {friends}.",
                            f"{cap(he)} splits them equally between {b} {friends}."])
            steps.append((v, "/", b, r))
        sentences.append(s)
        ops.append(op)
        v = r
    if ops[-1] == "div":
        q = rng.choice([f"How many {item} does each of the {friends} get?",
                        f"How many {item} does each one get?"])
    elif ops[-1] == "mul" and len(ops) == 1:
        q = rng.choice([f"How many {item} does {name} have?",
                        f"How many {item} are there in total?",
                        f"What is the total number of {item}?"])
    else:
        q = rng.choice([f"How many {item} does {name} have now?",
                        f"How many {item} does {he} have left?" if ops[-1] == "sub"
                        else f"How many {item} does {he} have in the end?",
                        f"How many {item} are there now?"])
    return Problem(" ".join(sentences + [q]), steps, v)


# ---- Large pools: the model must copy names and objects from the question --------------
#
# Training draws each name, item, container and group of friends from the fixed lists
# above, a larger list of real words (TRAIN_*), or a random pronounceable string. The
# HELDOUT_* words never occur in training (random strings that hit one are redrawn):
# tasks/arith/test_heldout_names.jsonl asks its problems with them only.

TRAIN_SHE = """Alice Amy Beth Carla Chloe Clara Daisy Diana Ella Elena Fiona Grace Hannah
Helen Iris Ivy Jane Julia Kate Laura Lucy Maria Nina Nora Olga Paula Rosa Ruby Sara Sofia
Tina Vera Wendy Yara Alma Bella Cora Dora Edith Flora Gina Hazel Irene Jenny Kira Lena
Maya Nadia Opal Petra Rita Selma Tara Una Viola Willa Xena Yvonne Zara Agnes Bianca Celia
Dana Erin Freya Gloria Holly Ingrid Joan Karen Lola Mabel Nell Olive Pam Rachel Susan
Thea Ursula Violet""".split()
TRAIN_HE = """Adam Alex Andy Bob Carl Chris Dan David Eric Frank Fred George Greg Harry
Henry Ian Ivan Jake James Joe John Karl Kevin Liam Luke Mark Mike Nick Oscar Owen Paul
Pete Ray Rick Ryan Simon Steve Ted Tim Victor Will Abel Bruno Cyril Dirk Elmer Felix
Gus Hugo Igor Jonas Kurt Lars Milo Ned Otto Pablo Quinn Rex Rudy Saul Toby Ugo Vince
Walt Yusuf Zack Arlo Boris Colin Dean Emil Finn Glen Hank Joel Kirk Louis Marco Neil
Omar Raul Seth Troy""".split()
TRAIN_ITEMS = """buttons candles cups plates spoons forks bowls hats socks shoes gloves scarves
balls kites dolls cars trucks boats planes trains blocks bricks beads rings pins nails
screws bolts keys locks bells drums flutes pens crayons erasers rulers notebooks folders
letters stamps envelopes postcards photos posters maps tickets badges medals coins
peaches pears plums cherries grapes lemons limes melons oranges carrots potatoes onions
tomatoes peppers beans nuts seeds acorns pebbles stones rocks feathers leaves sticks
cakes pies muffins candies lollipops cupcakes donuts bagels biscuits sandwiches
bottles cans tins jars cups mugs glasses towels pillows blankets""".split()
TRAIN_CONTAINERS = [("crate", "crates"), ("tray", "trays"), ("bucket", "buckets"),
                    ("carton", "cartons"), ("sack", "sacks"), ("bin", "bins"),
                    ("chest", "chests"), ("case", "cases"), ("drawer", "drawers"),
                    ("shelf", "shelves"), ("pouch", "pouches"), ("tub", "tubs"),
                    ("barrel", "barrels"), ("cup", "cups"), ("bowl", "bowls"),
                    ("tin", "tins"), ("kit", "kits"), ("set", "sets"), ("row", "rows"),
                    ("pile", "piles"), ("stack", "stacks"), ("bundle", "bundles"),
                    ("envelope", "envelopes"), ("folder", "folders"), ("wagon", "wagons")]
TRAIN_FRIENDS = """friends children classmates cousins students kids neighbors players
teammates brothers sisters guests campers pupils workers visitors""".split()

HELDOUT_SHE = """Olivia Amelia Charlotte Harper Evelyn Abigail Emily Madison Scarlett Victoria
Aria Penelope Layla Riley Zoey Nevaeh Lillian Addison Aubrey Brooklyn Savannah Audrey
Claire Skylar Lucia Naomi Camila Eleanor Stella Natalie""".split()
HELDOUT_HE = """Oliver Elijah William Lucas Mason Logan Ethan Jacob Michael Daniel Henrik
Sebastian Matthew Samuel Joseph Wyatt Carter Julian Grayson Isaac Lincoln Anthony Hudson
Dylan Ezra Thomas Charles Christopher Jaxon Maverick""".split()
HELDOUT_ITEMS = """walnuts ribbons magnets puzzles balloons whistles crackers pretzels
marshmallows chestnuts raisins almonds figs apricots mangoes coconuts pumpkins cucumbers
thimbles buckles lanterns compasses helmets jackets umbrellas tulips daisies roses
seashells dominoes""".split()
HELDOUT_CONTAINERS = [
    ("hamper", "hampers"), ("satchel", "satchels"), ("canister", "canisters"),
    ("suitcase", "suitcases"), ("cooler", "coolers"), ("locker", "lockers"),
    ("cabinet", "cabinets"), ("backpack", "backpacks"), ("purse", "purses"),
    ("trunk", "trunks")]
HELDOUT_FRIENDS = """nephews nieces roommates colleagues scouts dancers""".split()

HELDOUT_WORDS = set(w.lower() for w in HELDOUT_SHE + HELDOUT_HE + HELDOUT_ITEMS + HELDOUT_FRIENDS
                    + [c for pair in HELDOUT_CONTAINERS for c in pair])

ONSETS = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl st tr sh ch th".split()
VOWELS = "a e i o u a e i o ai ea oo".split()
CODAS = ["", "", "", "n", "l", "r", "s", "m", "t", "k", "nd", "rt", "st"]


def random_word(rng, syllables):
    """A pronounceable lower-case string (consonant-vowel syllables), never a held-out word."""
    while True:
        w = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables))
        w += rng.choice(CODAS)
        if w not in HELDOUT_WORDS and w.rstrip("s") not in HELDOUT_WORDS:
            return w


def plural(w):
    return w + ("es" if w.endswith(("s", "sh", "ch", "x", "z")) else "s")


def _person(name, she):
    return (name, "she", "her") if she else (name, "he", "him")


class Pools:
    """Draws names (with their pronouns), items, containers and friends: for training
    (fixed lists, TRAIN_* words, random strings, by the shares given) or held-out."""

    def __init__(self, heldout=False, fixed=0.25, words=0.35):
        self.heldout, self.fixed, self.words = heldout, fixed, words

    def _source(self, rng):
        if self.heldout:
            return "heldout"
        r = rng.random()
        return "fixed" if r < self.fixed else "words" if r < self.fixed + self.words else "random"

    def name(self, rng):
        src = self._source(rng)
        if src == "fixed":
            return rng.choice(NAMES)
        if src == "random":
            # names ending in a vowel sound read as "she", others as "he"
            w = cap(random_word(rng, rng.choice((1, 2, 2, 3))))
            return _person(w, w[-1] in "aiey")
        she = rng.random() < 0.5
        pool = (HELDOUT_SHE if she else HELDOUT_HE) if src == "heldout" else (
            TRAIN_SHE if she else TRAIN_HE)
        return _person(rng.choice(pool), she)

    def item(self, rng):
        src = self._source(rng)
        if src == "fixed":
            return rng.choice(ITEMS)
        if src == "random":
            return plural(random_word(rng, rng.choice((1, 2, 2, 3))))
        return rng.choice(HELDOUT_ITEMS if src == "heldout" else TRAIN_ITEMS)

    def container(self, rng):
        src = self._source(rng)
        if src == "fixed":
            return rng.choice(CONTAINERS)
        if src == "random":
            w = random_word(rng, rng.choice((1, 2)))
            return w, plural(w)
        return rng.choice(HELDOUT_CONTAINERS if src == "heldout" else TRAIN_CONTAINERS)

    def friends(self, rng):
        src = self._source(rng)
        if src == "fixed":
            return rng.choice(FRIENDS)
        if src == "random":
            return plural(random_word(rng, rng.choice((1, 2))))
        return rng.choice(HELDOUT_FRIENDS if src == "heldout" else TRAIN_FRIENDS)


def _check_pools():
    train = set(w.lower() for w in TRAIN_SHE + TRAIN_HE + TRAIN_ITEMS + TRAIN_FRIENDS
                + [c for pair in TRAIN_CONTAINERS for c in pair])
    fixed = set(w.lower() for w in [n[0] for n in NAMES] + ITEMS + FRIENDS
                + [c for pair in CONTAINERS for c in pair])
    clash = HELDOUT_WORDS & (train | fixed)
    assert not clash, clash


_check_pools()


def drill(p):
    """The same arithmetic as problem p asked bare ("What is (3 + 5) / 4?"), with the
    same working: a cheap example of the working lines for training."""
    a, op, b, _ = p.steps[0]
    expr = f"{a} {op} {b}"
    for _, op2, c, _ in p.steps[1:]:
        expr = f"({expr}) {op2} {c}"
    return Problem(f"What is {expr}?", p.steps, p.answer)


def problem_text(p):
    """The text a problem is trained and few-shot prompted in."""
    return f"Question: {p.question}\nAnswer: {p.answer_text()}"


if __name__ == "__main__":
    rng = random.Random(1)
    for _ in range(8):
        print(problem_text(make_problem(rng)))
        print()
