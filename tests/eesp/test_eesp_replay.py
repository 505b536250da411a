"""EESP anti-replay in the C core (through pyeesp) against a reference set model (eesp.md §11, §16 steps 8-10).

Skipped as a whole until `pyeesp` is importable.

Reference model (`RefWindow`, the same rule as `eesp_model.ReplayModel`, which is cross-checked on every step):
every accepted sequence number of one Sub SA is kept in a set, `top` is the highest one (0 before the first);
the window covers [top - size + 1, top]; s > top is new, s <= top - size is too old ("replay-too-old"),
otherwise s is a duplicate ("replay-duplicate") iff it was accepted. Only a packet whose ICV verified is
accepted; a packet that fails the replay pre-check is dropped before decryption.

What is asserted:
- A hypothesis state machine drives one receiving SA with an SSKDF and 1-3 Sub SAs (window 64, 128 or 1024;
  AES-GCM-16, ChaCha20-Poly1305, AES-GCM-16-IIV or AES-CCM-8). Genuine packets are sealed in order by a core
  sender (cached across examples); arrivals are next-in-line, small and large jumps ahead (within and beyond the
  window), holes inside the window, duplicates, exact window edges and too-old packets, plus tampered packets:
  a flipped bit after the header (bad ICV, same Seq) or a forged Seq (any value, often far ahead). For every
  arrival the reference predicts: accepted (the right inner packet, Seq and Sub SA), ReplayError with the
  predicted code, or AuthenticationError; the core must agree every time.
- Directed tests: duplicates and too-old packets raise ReplayError even with a bad ICV (never reach
  decryption); a failed ICV never moves the window (a forged far-ahead Seq, then older genuine packets are
  still accepted; a tampered copy of a new Seq does not use that Seq up); windows are independent per Sub SA;
  sequence number 0 (crafted with the model) is "eesp-sequence-zero" before and after traffic, with and
  without a valid ICV, and moves nothing; windows near 2^64 - 1 (model-crafted packets); anti_replay=False and
  SN = None accept duplicates.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import eesp_model as m

pyeesp = pytest.importorskip("pyeesp")

WINDOWS = (64, 128, 1024)
SUITES = (20, 28, 30, 14)  # AES-GCM-16, ChaCha20-Poly1305, AES-GCM-16-IIV, AES-CCM-8
KEY_BITS = {20: 128, 28: 256, 30: 256, 14: 192}
ROOT = bytes(range(100, 132))  # HKDF-SHA-256 root key
SPI = 0x00E5_5E9A
N_SUB_SAS = 3
SEQ_CAP = 8 * 1024  # the machine stops jumping ahead once a Sub SA's top passes this
OUTER_LEN = 20  # the core copies the inner IPv4 header as the outer header (tunnel mode, no template)


def inner_packet(sid: int, seq: int) -> bytes:
    """An IPv4/UDP packet naming its Sub SA and sequence number, so a decryption shows which packet it was."""
    payload = struct.pack(">HQ", sid, seq)
    udp = struct.pack(">HHHH", 5000, 6000, 8 + len(payload), 0) + payload
    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, bytes([192, 0, 2, 1]),
                      bytes([192, 0, 2, 2]))
    return hdr[:10] + struct.pack(">H", m.ipv4_checksum(hdr)) + hdr[12:] + udp


def core_sa(suite: int, window: int = 1024, **kw) -> "pyeesp.SA":
    return pyeesp.SA(SPI, suite, root_key=ROOT, sskdf="hkdf-sha256", key_bits=KEY_BITS[suite], mode="tunnel",
                     replay_window=window, **kw)


def model_sa(suite: int, window: int = 1024, **kw) -> m.SA:
    return m.SA(spi=SPI, encr_id=suite, key_bits=KEY_BITS[suite], sskdf=1, root_key=ROOT, mode="tunnel",
                replay_window=window, **kw)


class PacketSource:
    """Genuine packets per Sub SA, sealed in order (Seq 1, 2, ...) by one core sender. Shared by all examples
    (every example gets a fresh receiver), so each packet is sealed once."""

    _by_suite: dict = {}

    def __init__(self, suite: int):
        self.suite = suite
        self.sender = core_sa(suite)
        self.packets: dict[int, list[bytes]] = {}

    @classmethod
    def for_suite(cls, suite: int) -> "PacketSource":
        if suite not in cls._by_suite:
            cls._by_suite[suite] = cls(suite)
        return cls._by_suite[suite]

    def get(self, sid: int, seq: int) -> bytes:
        lst = self.packets.setdefault(sid, [])
        while len(lst) < seq:
            assert self.sender.next_seq(sid) == len(lst) + 1
            lst.append(self.sender.encrypt(inner_packet(sid, len(lst) + 1), sid))
        return lst[seq - 1]


def seq_offset(pkt: bytes) -> int:
    """Where the 8-octet Sequence Number sits in an outer packet (IPv4 outer, no UDP)."""
    return OUTER_LEN + 8 + pkt[OUTER_LEN + 1]


def body_offset(pkt: bytes, suite: int) -> int:
    """First octet after Base, options, Seq and IV: payload, padding, ICV follow."""
    return seq_offset(pkt) + 8 + m.SUITES[suite].iv_len


def forge_seq(pkt: bytes, seq: int) -> bytes:
    """The packet with its Sequence Number replaced (the ICV no longer verifies)."""
    at = seq_offset(pkt)
    return pkt[:at] + struct.pack(">Q", seq) + pkt[at + 8 :]


def flip_bit(pkt: bytes, bit: int) -> bytes:
    b = bytearray(pkt)
    b[bit // 8] ^= 0x80 >> (bit % 8)
    return bytes(b)


class RefWindow:
    """The reference: accepted set + window rule (see the module docstring)."""

    def __init__(self, size: int):
        self.size = size
        self.top = 0
        self.accepted: set[int] = set()
        self.accepted_list: list[int] = []  # arrival order, for sampling duplicates

    def check(self, s: int) -> str:
        if s == 0:
            return "eesp-sequence-zero"
        if s > self.top:
            return "ok"
        if s <= self.top - self.size:
            return "replay-too-old"
        return "replay-duplicate" if s in self.accepted else "ok"

    def update(self, s: int) -> None:
        self.accepted.add(s)
        self.accepted_list.append(s)
        self.top = max(self.top, s)


def outcome(rx, pkt: bytes):
    try:
        return rx.decrypt(pkt)
    except pyeesp.EespError as e:
        return e


def describe(got) -> str:
    if isinstance(got, pyeesp.EespError):
        return f"{type(got).__name__}({got.code})"
    return f"accepted(seq={got.seq}, sub_sa={got.sub_sa_id})"


def expect(got, want: str, *, sid: int, seq: int, what: str) -> None:
    """want: "accept", "authentication-failed", or a replay / sequence-zero code."""
    msg = f"{what}: Sub SA {sid}, Seq {seq}: expected {want}, core gave {describe(got)}"
    if want == "accept":
        assert isinstance(got, pyeesp.Decrypted), msg
        assert got.seq == seq and got.sub_sa_id == sid and got.packet == inner_packet(sid, seq), msg
    elif want == "authentication-failed":
        assert isinstance(got, pyeesp.AuthenticationError) and got.code == want, msg
    elif want == "eesp-sequence-zero":
        assert isinstance(got, pyeesp.MalformedPacketError) and got.code == want, msg
    else:
        assert isinstance(got, pyeesp.ReplayError) and got.code == want, msg


# --------------------------------------------------------------------------------------------------------
# the state machine
# --------------------------------------------------------------------------------------------------------


def draw_seq(data, w: RefWindow, label: str) -> int:
    """A sequence number chosen relative to the window: new ones, holes, duplicates, edges, too-old ones."""
    size, top = w.size, w.top
    kinds = ["next", "ahead"]
    if top < SEQ_CAP:
        kinds += ["jump", "beyond"]
    if top >= 1:
        kinds += ["in_window", "duplicate", "edge"]
    if top > size:
        kinds += ["too_old"]
    kind = data.draw(st.sampled_from(kinds), label=f"{label} kind")
    if kind == "next":
        return top + 1
    if kind == "ahead":
        return top + data.draw(st.integers(1, 8), label=label)
    if kind == "jump":  # stays within one window of the old top
        return top + data.draw(st.integers(1, size), label=label)
    if kind == "beyond":  # slides the whole window past the old top
        return top + size + data.draw(st.integers(0, 64), label=label)
    if kind == "in_window":
        return data.draw(st.integers(max(1, top - size + 1), top), label=label)
    if kind == "duplicate":
        return data.draw(st.sampled_from(w.accepted_list), label=label)
    if kind == "edge":
        return data.draw(st.sampled_from([s for s in (top - size, top - size + 1, top) if s >= 1]), label=label)
    return data.draw(st.integers(1, top - size), label=label)  # too old


class ReplayMachine(RuleBasedStateMachine):
    """One receiving SA; per Sub SA a RefWindow and an eesp_model.ReplayModel; every arrival predicted."""

    @initialize(suite=st.sampled_from(SUITES), window=st.sampled_from(WINDOWS), n_sub=st.integers(1, N_SUB_SAS))
    def setup(self, suite, window, n_sub):
        self.suite, self.window, self.n_sub = suite, window, n_sub
        self.source = PacketSource.for_suite(suite)
        self.rx = pyeesp.Receiver([core_sa(suite, window)])
        self.ref = {sid: RefWindow(window) for sid in range(n_sub)}
        self.model = {sid: m.ReplayModel(window) for sid in range(n_sub)}
        self.arrivals = 0
        note(f"suite {suite}, window {window}, {n_sub} Sub SAs")

    def _predict(self, sid: int, seq: int) -> str:
        verdict = self.ref[sid].check(seq)
        if seq != 0:  # the model's ReplayModel gives the same verdict (it leaves 0 to the receiver)
            assert self.model[sid].check(seq) == verdict, (sid, seq, verdict)
        return "accept" if verdict == "ok" else verdict

    def _accepted(self, sid: int, seq: int) -> None:
        self.ref[sid].update(seq)
        self.model[sid].update(seq)

    @rule(data=st.data())
    def genuine(self, data):
        sid = data.draw(st.integers(0, self.n_sub - 1), label="sub sa")
        seq = draw_seq(data, self.ref[sid], "seq")
        want = self._predict(sid, seq)
        got = outcome(self.rx, self.source.get(sid, seq))
        note(f"genuine Sub SA {sid} Seq {seq}: {want}")
        expect(got, want, sid=sid, seq=seq, what="genuine packet")
        if want == "accept":
            self._accepted(sid, seq)
        self.arrivals += 1

    @rule(data=st.data())
    def bad_icv(self, data):
        """A genuine packet with one bit flipped after the header: same Seq, the ICV fails."""
        sid = data.draw(st.integers(0, self.n_sub - 1), label="sub sa")
        seq = draw_seq(data, self.ref[sid], "seq")
        pkt = self.source.get(sid, seq)
        bit = data.draw(st.integers(8 * body_offset(pkt, self.suite), 8 * len(pkt) - 1), label="flipped bit")
        verdict = self._predict(sid, seq)
        want = "authentication-failed" if verdict == "accept" else verdict
        note(f"bad ICV Sub SA {sid} Seq {seq}: {want}")
        expect(outcome(self.rx, flip_bit(pkt, bit)), want, sid=sid, seq=seq, what="tampered packet")
        self.arrivals += 1

    @rule(data=st.data())
    def forged_seq(self, data):
        """A genuine packet whose Sequence Number was rewritten: replay-checked as the forged Seq, then the ICV
        fails. Often far ahead of the window, which must not move."""
        sid = data.draw(st.integers(0, self.n_sub - 1), label="sub sa")
        w = self.ref[sid]
        base = data.draw(st.integers(1, max(1, w.top + 1)), label="packet seq")
        forged = data.draw(st.one_of(st.integers(w.top + 1, w.top + 4 * self.window), st.just(m.MAX_SEQ),
                                     st.integers(0, m.MAX_SEQ), st.just(base + 1)), label="forged seq")
        if forged == base:
            forged += 1
        verdict = self._predict(sid, forged)
        want = "authentication-failed" if verdict == "accept" else verdict
        note(f"forged Sub SA {sid} packet {base} as Seq {forged}: {want}")
        got = outcome(self.rx, forge_seq(self.source.get(sid, base), forged))
        msg = f"forged packet: Sub SA {sid}, Seq {base} rewritten to {forged}: expected {want}, got {describe(got)}"
        assert isinstance(got, pyeesp.EespError) and got.code == want, msg
        self.arrivals += 1

    @invariant()
    def windows_in_step(self):
        if hasattr(self, "ref"):
            for sid in self.ref:
                assert self.ref[sid].top == self.model[sid].top


TestReplayMachine = ReplayMachine.TestCase
# 25 arrivals per run (the profile's max_examples runs): jumps of up to one window and beyond make that enough
# to slide every window several times; longer runs mostly cost time
TestReplayMachine.settings = settings(stateful_step_count=25)


# --------------------------------------------------------------------------------------------------------
# directed tests
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", WINDOWS)
def test_duplicates_and_too_old_never_reach_decryption(window):
    src = PacketSource.for_suite(20)
    rx = pyeesp.Receiver([core_sa(20, window)])
    for seq in (1, 2, window + 10):
        expect(outcome(rx, src.get(0, seq)), "accept", sid=0, seq=seq, what="genuine")
    # top = window + 10: the window is [11, window + 10]
    expect(outcome(rx, src.get(0, 11)), "accept", sid=0, seq=11, what="hole at the window's left edge")
    # a duplicate / too-old packet is a ReplayError even with a bad ICV (not an AuthenticationError): the
    # pre-check ran before decryption
    for seq, code in ((2, "replay-too-old"), (10, "replay-too-old"), (window + 10, "replay-duplicate"),
                      (11, "replay-duplicate")):
        pkt = src.get(0, seq)
        for bad in (pkt, flip_bit(pkt, 8 * len(pkt) - 1)):
            got = outcome(rx, bad)
            assert isinstance(got, pyeesp.ReplayError) and got.code == code, (seq, describe(got))
    # the next genuine packets behave as predicted
    expect(outcome(rx, src.get(0, window + 11)), "accept", sid=0, seq=window + 11, what="next genuine")
    expect(outcome(rx, src.get(0, 11)), "replay-too-old", sid=0, seq=11, what="now left of the window")
    expect(outcome(rx, src.get(0, 13)), "accept", sid=0, seq=13, what="hole inside the window")


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("suite", SUITES)
def test_failed_icv_never_moves_the_window(suite, window):
    src = PacketSource.for_suite(suite)
    rx = pyeesp.Receiver([core_sa(suite, window)])
    for seq in (1, 3):
        expect(outcome(rx, src.get(0, seq)), "accept", sid=0, seq=seq, what="genuine")
    # a forged Seq far ahead: the ICV fails; had the window slid there, 2 and 4 would be too old
    for forged in (3 + 10 * window, m.MAX_SEQ):
        got = outcome(rx, forge_seq(src.get(0, 3), forged))
        assert isinstance(got, pyeesp.AuthenticationError) and got.code == "authentication-failed", describe(got)
    # a tampered copy of a new Seq (bad ICV) does not use that Seq up
    pkt5 = src.get(0, 5)
    got = outcome(rx, flip_bit(pkt5, 8 * len(pkt5) - 1))
    assert isinstance(got, pyeesp.AuthenticationError), describe(got)
    for seq in (2, 4, 5):
        expect(outcome(rx, src.get(0, seq)), "accept", sid=0, seq=seq, what="older genuine after a bad ICV")
    expect(outcome(rx, src.get(0, 3)), "replay-duplicate", sid=0, seq=3, what="duplicate")


@pytest.mark.parametrize("window", WINDOWS)
def test_windows_are_independent_per_sub_sa(window):
    src = PacketSource.for_suite(20)
    rx = pyeesp.Receiver([core_sa(20, window)])
    far = 3 * window
    expect(outcome(rx, src.get(1, far)), "accept", sid=1, seq=far, what="Sub SA 1 far ahead")
    expect(outcome(rx, src.get(1, 1)), "replay-too-old", sid=1, seq=1, what="Sub SA 1 too old")
    for sid in (0, 2):  # untouched by Sub SA 1
        expect(outcome(rx, src.get(sid, 1)), "accept", sid=sid, seq=1, what="another Sub SA")
        expect(outcome(rx, src.get(sid, 1)), "replay-duplicate", sid=sid, seq=1, what="its own duplicate")
    expect(outcome(rx, src.get(0, far)), "accept", sid=0, seq=far, what="Sub SA 0 same Seq as Sub SA 1")
    expect(outcome(rx, src.get(2, 2)), "accept", sid=2, seq=2, what="Sub SA 2 still at its own top")
    expect(outcome(rx, src.get(1, far - window + 1)), "accept", sid=1, seq=far - window + 1, what="window edge")
    expect(outcome(rx, src.get(1, far - window)), "replay-too-old", sid=1, seq=far - window, what="past the edge")


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("suite", SUITES)
def test_sequence_zero_is_rejected(suite, window):
    msa = model_sa(suite, window)
    src = PacketSource.for_suite(suite)
    rx = pyeesp.Receiver([core_sa(suite, window)])
    for sid in (0, 2):
        zero = m.encap(msa, inner_packet(sid, 0), seq=0, session_id=sid, outer=inner_packet(sid, 0)[:20])
        assert zero[seq_offset(zero) : seq_offset(zero) + 8] == bytes(8)
        with pytest.raises(m.EespModelError) as mi:
            m.decap(msa, zero, windows={})
        assert mi.value.code == "eesp-sequence-zero"
        # with a valid ICV before any traffic on the Sub SA, then with a bad ICV after Seq 1 was accepted
        for pkt in (zero, flip_bit(zero, 8 * len(zero) - 1)):
            for _ in range(2):  # a second Seq 0 is no duplicate either: nothing was recorded
                got = outcome(rx, pkt)
                assert isinstance(got, pyeesp.MalformedPacketError) and got.code == "eesp-sequence-zero", \
                    describe(got)
            expect(outcome(rx, src.get(sid, 1)), "accept" if pkt is zero else "replay-duplicate", sid=sid, seq=1,
                   what="Seq 1 after Seq 0")
    # a forged Seq 0 on a genuine packet, after the window has moved
    expect(outcome(rx, src.get(0, window + 5)), "accept", sid=0, seq=window + 5, what="genuine")
    got = outcome(rx, forge_seq(src.get(0, 2), 0))
    assert isinstance(got, pyeesp.MalformedPacketError) and got.code == "eesp-sequence-zero", describe(got)


@given(window=st.sampled_from(WINDOWS), suite=st.sampled_from(SUITES), data=st.data())
def test_windows_near_the_top_of_the_sequence_space(window, suite, data):
    """Sequence numbers near 2^64 - 1, sealed by the model (the core sender cannot get there); the arithmetic
    must not overflow."""
    msa = model_sa(suite, window)
    rx = pyeesp.Receiver([core_sa(suite, window)])
    lo = m.MAX_SEQ - 3 * window
    seqs = data.draw(st.lists(st.integers(lo, m.MAX_SEQ) | st.sampled_from([m.MAX_SEQ, m.MAX_SEQ - window, lo]),
                              min_size=1, max_size=24), label="seqs")
    sid = data.draw(st.integers(0, 2), label="sub sa")
    ref = RefWindow(window)
    for i, seq in enumerate(seqs):
        tampered = data.draw(st.booleans(), label=f"tampered {i}")
        pkt = m.encap(msa, inner_packet(sid, seq), seq=seq, session_id=sid, outer=inner_packet(sid, seq)[:20])
        if tampered:
            pkt = flip_bit(pkt, 8 * len(pkt) - 1)
        verdict = ref.check(seq)
        want = ("authentication-failed" if tampered else "accept") if verdict == "ok" else verdict
        expect(outcome(rx, pkt), want, sid=sid, seq=seq, what=f"arrival {i}{' (tampered)' if tampered else ''}")
        if want == "accept":
            ref.update(seq)


@pytest.mark.parametrize("settings_", [dict(anti_replay=False), dict(seq=False)], ids=["anti_replay-off", "no-SN"])
def test_without_anti_replay_duplicates_are_accepted(settings_):
    sa = core_sa(20, 64, **settings_)
    pkts = [sa.encrypt(inner_packet(0, i + 1), 0) for i in range(200)]
    rx = pyeesp.Receiver([core_sa(20, 64, **settings_)])
    for i in (5, 5, 199, 0, 0, 199):
        got = outcome(rx, pkts[i])
        assert isinstance(got, pyeesp.Decrypted) and got.packet == inner_packet(0, i + 1), describe(got)
        assert got.seq == (i + 1 if settings_.get("seq", True) else None)
