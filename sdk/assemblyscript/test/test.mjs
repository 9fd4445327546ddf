// Tests of sdk/assemblyscript: compiles test/wrapper.ts with the pinned
// compiler and checks the SDK's functions from JavaScript.
// Usage: node test/test.mjs ASC   (ASC: path of the asc binary)
import { execFileSync } from "node:child_process";
import { readFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(mkdtempSync(join(tmpdir(), "agenthost-as-")), "t.wasm");
execFileSync(process.argv[2], [join(here, "wrapper.ts"), "--runtime", "stub", "--use", "abort=", "--outFile", out], { stdio: "inherit" });
const { instance } = await WebAssembly.instantiate(readFileSync(out), {});
const x = instance.exports;
const mem = () => new Uint8Array(x.memory.buffer);
const g = (name) => x[name].value;
let failed = 0;
function test(name, fn) {
  try { fn(); console.log("ok  ", name); } catch (e) { failed++; console.log("FAIL", name, e.message); }
}

function str(s) {
  const b = Buffer.from(s);
  const n = Buffer.alloc(4); n.writeUInt32LE(b.length);
  return Buffer.concat([n, b]);
}
function request({ flags = 0, steps = 0, queued = 0, meta = 0, thread = "t", content = "", hint = "", tail = Buffer.alloc(0) }) {
  const h = Buffer.alloc(16);
  h[0] = 1; h[1] = flags; h.writeUInt32LE(steps, 4); h.writeUInt32LE(queued, 8); h.writeUInt32LE(meta, 12);
  return Buffer.concat([h, str(thread), str(content), str(hint), tail]);
}
function put(b) {
  const p = x.allocRegion(b.length);
  assert.notEqual(p, 0);
  mem().set(b, p);
  return p;
}
const text = (p, n) => Buffer.from(mem().subarray(p, p + n)).toString();
function result(packed) {
  const p = Number(BigInt.asUintN(64, packed) >> 32n), n = Number(BigInt.asUintN(64, packed) & 0xffffffffn);
  return Buffer.from(mem().subarray(p, p + n));
}

test("parses the SPEC example", () => {
  const hex = "0101000002000000010000000100000001000000740200000068690600000072656669" +
    "6e65010000006b010000007601000000610100000000000000020000000100000001000000" +
    "780100000071020000000000000000000000000000";
  const b = Buffer.from(hex, "hex");
  const p = put(b);
  assert.equal(x.parseRequest(p, b.length), 0);
  assert.equal(g("active"), 1);
  assert.equal(g("activeSteps"), 2);
  assert.equal(g("queued"), 1);
  assert.equal(g("metadataPairs"), 1);
  assert.equal(text(g("threadIdPtr"), g("threadIdLen")), "t");
  assert.equal(text(g("contentPtr"), g("contentLen")), "hi");
  assert.equal(text(g("hintPtr"), g("hintLen")), "refine");
  assert.equal(g("restLen"), b.length - (g("hintPtr") + g("hintLen") - p));
});

test("refuses truncated and unknown requests", () => {
  const b = request({ content: "hello", hint: "stop" });
  for (let n = 0; n < b.length; n++) {
    const p = put(b);
    assert.equal(x.parseRequest(p, n), 1, `cut at ${n}`);
  }
  const bad = Buffer.from(b); bad[0] = 2;
  assert.equal(x.parseRequest(put(bad), bad.length), 2);
  const huge = Buffer.from(b); huge.writeUInt32LE(0xffffffff, 16);
  assert.equal(x.parseRequest(put(huge), huge.length), 1);
});

test("compares bytes with ASCII text", () => {
  const b = request({ hint: "refine" });
  const p = put(b);
  assert.equal(x.parseRequest(p, b.length), 0);
  assert.equal(x.hintIs(0), 1);
  assert.equal(x.hintIs(1), 0);
  assert.equal(x.hintIs(2), 0);
});

test("writes manifests and errors", () => {
  assert.equal(result(x.testManifest()).toString("latin1"),
    '\0{"abi":1,"name":"ex\\"a\\u000a","version":"1.0.0","hooks":["inputPolicy"],"actions":["queue","inject"]}');
  assert.equal(result(x.testError()).toString("latin1"), "\x01bad config");
});

test("encodes decisions", () => {
  assert.deepEqual([...result(x.decision(3, 1))], [0, 3, 1, 0]);
  assert.deepEqual([...result(x.decision(1, 0))], [0, 1, 0, 0]);
  assert.deepEqual([...result(x.decision(4, 0))], [0, 4, 0, 0]);
});

test("regions are reused, grown, and never 0", () => {
  const a = x.allocRegion(4096);
  assert.notEqual(a, 0);
  assert.equal(x.allocRegion(100), a);
  const big = x.allocRegion(3 << 20);
  assert.notEqual(big, 0);
  mem()[big + (3 << 20) - 1] = 7; // inside memory
});

test("parses the SPEC tool request example", () => {
  const b = Buffer.from("0100000002000000" + "02000000726d" + "020000006673" + "020000007b7d" +
    "0100000063" + "010000006b" + "0100000072" + "0100000074", "hex");
  const p = put(b);
  assert.equal(x.parseToolRequest(p, b.length), 0);
  assert.equal(g("toolStep"), 2);
  const field = (name) => text(g(name + "Ptr"), g(name + "Len"));
  assert.deepEqual(["tool", "server", "arguments", "callId", "idempotencyKey", "runId", "toolThreadId"].map(field),
    ["rm", "fs", "{}", "c", "k", "r", "t"]);
  for (let n = 0; n < b.length; n++) {
    assert.equal(x.parseToolRequest(put(b), n), 1, `cut at ${n}`);
  }
  const bad = Buffer.from(b); bad[0] = 2;
  assert.equal(x.parseToolRequest(put(bad), bad.length), 2);
});

test("finds text in a tool name", () => {
  const h = Buffer.alloc(8); h[0] = 1;
  const b = Buffer.concat([h, str("fs_delete"), ...Array(6).fill(str(""))]);
  assert.equal(x.parseToolRequest(put(b), b.length), 0);
  assert.equal(x.toolContains(0), 1);
  assert.equal(x.toolContains(1), 0);
  assert.equal(x.toolContains(2), 0);
});

test("writes manifests with hooks", () => {
  assert.equal(result(x.testManifestHooks(0)).toString("latin1"), '\0{"abi":1,"name":"t","version":"1","hooks":["toolPolicy"]}');
  assert.equal(result(x.testManifestHooks(1)).toString("latin1"),
    '\0{"abi":1,"name":"t","version":"1","hooks":["inputPolicy","toolPolicy"],"actions":["queue"]}');
});

test("encodes tool decisions", () => {
  assert.deepEqual([...result(x.testToolDecision(0))], [0, 1, 0, 0]);
  const deny = result(x.testToolDecision(1));
  assert.deepEqual([...deny.subarray(0, 4)], [0, 2, 0, 0]);
  assert.equal(deny.subarray(4).toString("utf8"), "no, ¬ 要 😀");
  assert.deepEqual([...result(x.testToolDecision(2))], [0, 3, 16, 0, ...Buffer.from("ok?")]);
  const long = result(x.testToolDecision(3));
  assert.equal(long.length, 1024); // cut to the buffer, on a character boundary
  assert.equal(long.subarray(4).toString("utf8"), "é".repeat(510));
});

if (failed) { console.log(`${failed} failed`); process.exit(1); }
