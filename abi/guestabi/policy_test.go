package guestabi

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
)

func TestPolicyRequestRoundTrip(t *testing.T) {
	for _, r := range []PolicyRequest{
		{},
		{ThreadID: "t", Content: "actually, shorter", Hint: "refine"},
		{
			ThreadID: "t-1", Content: "héllo", Hint: "",
			Metadata: map[string]string{"b": "2", "a": "1"},
			Active:   &Run{RunID: "r-1", Seq: 7, Steps: 3, Inputs: []string{"x"}},
			Queued:   []Run{{RunID: "r-2", Seq: 8, Inputs: []string{"y", ""}}, {RunID: "r-3", Seq: -1}},
		},
	} {
		b := AppendPolicyRequest(nil, &r)
		var got PolicyRequest
		if err := DecodePolicyRequest(b, &got); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.Queued == nil {
			got.Queued = r.Queued
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
		for i := range len(b) {
			if err := DecodePolicyRequest(b[:i], &got); err == nil {
				t.Errorf("truncated at %d of %d decoded", i, len(b))
			}
		}
	}
}

// TestPolicyRequestLayout pins the bytes SPEC.md documents.
func TestPolicyRequestLayout(t *testing.T) {
	r := PolicyRequest{
		ThreadID: "t", Content: "hi", Hint: "refine",
		Metadata: map[string]string{"k": "v"},
		Active:   &Run{RunID: "a", Seq: 1, Steps: 2, Inputs: []string{"x"}},
		Queued:   []Run{{RunID: "q", Seq: 2}},
	}
	want := "01010000" + // layout 1, active flag, reserved
		"02000000" + // active run steps
		"01000000" + // queued runs
		"01000000" + // metadata pairs
		"01000000" + "74" + // thread id "t"
		"02000000" + "6869" + // content "hi"
		"06000000" + "726566696e65" + // hint "refine"
		"01000000" + "6b" + "01000000" + "76" + // k=v
		"01000000" + "61" + "0100000000000000" + "02000000" + "01000000" + "01000000" + "78" + // active run
		"01000000" + "71" + "0200000000000000" + "00000000" + "00000000" // queued run
	if got := hex.EncodeToString(AppendPolicyRequest(nil, &r)); got != want {
		t.Errorf("layout\n got %s\nwant %s", got, want)
	}
}

func TestDecision(t *testing.T) {
	for _, d := range []Decision{{Action: ActionQueue}, {Action: ActionInject, CoalescePending: true}, {Action: ActionReject}} {
		got, err := DecodeDecision(AppendDecision(nil, d))
		if err != nil || got != d {
			t.Errorf("%+v: got %+v, %v", d, got, err)
		}
	}
	if hex.EncodeToString(AppendDecision(nil, Decision{Action: ActionInterrupt, CoalescePending: true})) != "00030100" {
		t.Error("decision layout changed")
	}
	for _, b := range [][]byte{nil, {0}, {0, 9, 0, 0}, {0, 1, 2, 0}, {0, 1, 0, 1}, {0, 1, 0, 0, 0}, {7, 1, 0, 0}} {
		if _, err := DecodeDecision(b); err == nil {
			t.Errorf("%x decoded", b)
		}
	}
	_, err := DecodeDecision(AppendError(nil, "boom"))
	if ge, ok := err.(*GuestError); !ok || ge.Message != "boom" {
		t.Errorf("error result: %v", err)
	}
}

func TestPack(t *testing.T) {
	if p, n := Unpack(Pack(0xfffffff0, 7)); p != 0xfffffff0 || n != 7 {
		t.Error(p, n)
	}
}

func FuzzDecodePolicyRequest(f *testing.F) {
	f.Add(AppendPolicyRequest(nil, &PolicyRequest{ThreadID: "t", Active: &Run{Inputs: []string{"a"}}, Queued: []Run{{}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r PolicyRequest
		if DecodePolicyRequest(b, &r) == nil {
			if got := AppendPolicyRequest(nil, &r); string(got) != string(b) {
				t.Errorf("re-encoding differs: %x vs %x", got, b)
			}
		}
	})
}

func TestReadPolicyHeader(t *testing.T) {
	r := PolicyRequest{ThreadID: "t", Content: "hi", Hint: "refine", Active: &Run{Steps: 4}, Queued: []Run{{}, {}}}
	b := AppendPolicyRequest(nil, &r)
	var h PolicyHeader
	if err := ReadPolicyHeader(b, &h); err != nil {
		t.Fatal(err)
	}
	if !h.Active || h.ActiveSteps != 4 || h.Queued != 2 || string(h.ThreadID) != "t" || string(h.Content) != "hi" || string(h.Hint) != "refine" {
		t.Errorf("%+v", h)
	}
	for i := range 16 + 4 + 1 + 4 + 2 + 4 + 6 {
		if ReadPolicyHeader(b[:i], &h) == nil {
			t.Errorf("truncated at %d read", i)
		}
	}
}

// TestPolicyRequestMetadataOrder: metadata pairs are encoded in ascending
// key order, however many there are (few are sorted on the stack, many
// otherwise).
func TestPolicyRequestMetadataOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8, 9, 40} {
		md := map[string]string{}
		for i := range n {
			md[fmt.Sprintf("k%03d", (i*37)%101)] = fmt.Sprint(i)
		}
		b := AppendPolicyRequest(nil, &PolicyRequest{Metadata: md})
		// Header, then thread id, content and hint (empty), then the pairs.
		rest := b[PolicyHeaderSize+12:]
		var prev string
		for i := range n {
			k := string(rest[4 : 4+binary.LittleEndian.Uint32(rest)])
			rest = rest[4+len(k):]
			v := string(rest[4 : 4+binary.LittleEndian.Uint32(rest)])
			rest = rest[4+len(v):]
			if i > 0 && k <= prev {
				t.Fatalf("%d pairs: key %q after %q", n, k, prev)
			}
			if md[k] != v {
				t.Fatalf("%d pairs: %q=%q, want %q", n, k, v, md[k])
			}
			prev = k
		}
		if len(rest) != 0 {
			t.Fatalf("%d pairs: %d bytes left", n, len(rest))
		}
	}
}
