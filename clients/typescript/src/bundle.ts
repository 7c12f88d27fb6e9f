// Bundles as data: verify a run's bundle (the .tar.zst GetBundle streams)
// and read its manifest and entries. The digest is the SHA-256 of the
// uncompressed tar; the manifest lists every other entry with its size and
// SHA-256, and its reproducible section has a digest of its own. verify
// checks all three and refuses what a canonical bundle never holds.

import { createHash } from "node:crypto";

import { decompress } from "fzstd";

import { BundleInvalid } from "./errors.js";

const FORMAT = "sandboxd.bundle/v1";
const decoder = new TextDecoder("utf-8", { fatal: true });

/** A verified bundle: its digest, its manifest and its entries. */
export interface Bundle {
  digest: string;
  manifest: { reproducible: Record<string, any>; run: Record<string, any>; format: string };
  entries: Map<string, Uint8Array>;
}

function sha256(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

function field(block: Uint8Array, start: number, length: number): string {
  let end = start;
  while (end < start + length && block[end] !== 0) end++;
  return Buffer.from(block.subarray(start, end)).toString("utf8");
}

function octal(block: Uint8Array, start: number, length: number): number {
  const s = field(block, start, length).trim();
  return s === "" ? 0 : parseInt(s, 8);
}

interface TarEntry {
  name: string;
  type: string;
  mode: number;
  data: Uint8Array;
}

// The entries of a ustar archive with PAX long names, which is all a
// bundle's writer makes.
function* readTar(tar: Uint8Array): Generator<TarEntry> {
  let offset = 0;
  let longName: string | undefined;
  while (offset + 512 <= tar.length) {
    const header = tar.subarray(offset, offset + 512);
    if (header.every((b) => b === 0)) return;
    const size = octal(header, 124, 12);
    const type = String.fromCharCode(header[156] || 48);
    const prefix = field(header, 345, 155);
    let name = field(header, 0, 100);
    if (prefix) name = prefix + "/" + name;
    const data = tar.subarray(offset + 512, offset + 512 + size);
    if (data.length !== size) throw new BundleInvalid(`entry ${JSON.stringify(name)} is cut short`);
    offset += 512 + Math.ceil(size / 512) * 512;
    if (type === "x") {
      // PAX records: "LEN key=value\n".
      const text = Buffer.from(data).toString("utf8");
      for (const m of text.matchAll(/\d+ ([^=]+)=([^\n]*)\n/g)) {
        if (m[1] !== "path") throw new BundleInvalid(`entry carries the PAX record ${JSON.stringify(m[1])}`);
        longName = m[2];
      }
      continue;
    }
    yield { name: longName ?? name, type, mode: octal(header, 100, 8), data };
    longName = undefined;
  }
}

// Each character of JSON text with its index, and whether it is outside
// every string (so white space there is between tokens).
function* outsideStrings(text: string): Generator<[number, string, boolean]> {
  let inString = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') inString = false;
      yield [i, ch, false];
    } else {
      inString = ch === '"';
      yield [i, ch, !inString];
    }
  }
}

const SPACE = " \t\r\n";

// JSON without the white space between tokens, strings untouched, as Go's
// json.Compact writes it: what the reproducible digest is of.
function compact(raw: string): string {
  let out = "";
  for (const [, ch, outside] of outsideStrings(raw)) if (!(outside && SPACE.includes(ch))) out += ch;
  return out;
}

// The raw text of the manifest's top-level "reproducible" value.
function reproducibleSection(text: string): string {
  const key = '"reproducible"';
  let depth = 0;
  let last = ""; // the last character between tokens: a key follows { or ,
  let start = -1;
  for (const [i, ch, outside] of outsideStrings(text)) {
    if (start >= 0) {
      if (outside && (ch === "{" || ch === "[")) depth++;
      else if (outside && (ch === "}" || ch === "]") && --depth === 1) return text.slice(start, i + 1);
      continue;
    }
    if (outside && (ch === "{" || ch === "[")) depth++;
    else if (outside && (ch === "}" || ch === "]")) depth--;
    else if (ch === '"' && (last === "{" || last === ",") && depth === 1 && text.startsWith(key, i)) {
      start = text.indexOf(":", i + key.length) + 1;
      while (SPACE.includes(text[start])) start++;
      if (text[start] !== "{") throw new BundleInvalid("manifest: the reproducible section is not an object");
    }
    if (outside && !SPACE.includes(ch)) last = ch;
    else if (ch === '"') last = '"';
  }
  throw new BundleInvalid("manifest: no reproducible section");
}

/**
 * Verify a bundle's bytes (zstd-compressed tar) and return it; throws
 * BundleInvalid naming what is wrong. With digest, it must be that bundle.
 */
export function verifyBundle(data: Uint8Array, digest?: string): Bundle {
  let tar: Uint8Array;
  try {
    tar = decompress(data);
  } catch (e) {
    throw new BundleInvalid(`not a zstd stream: ${(e as Error).message}`);
  }
  const got = "sha256:" + sha256(tar);
  if (digest !== undefined && got !== digest) throw new BundleInvalid(`the bundle's digest is ${got}, not ${digest}`);

  const entries = new Map<string, Uint8Array>();
  const executable = new Map<string, boolean>();
  let manifestRaw: Uint8Array | undefined;
  for (const e of readTar(tar)) {
    if (e.name.startsWith("/") || e.name.split("/").includes("..")) {
      throw new BundleInvalid(`entry ${JSON.stringify(e.name)} leaves the bundle`);
    }
    if (e.type === "5") continue;
    if (e.type !== "0") throw new BundleInvalid(`entry ${JSON.stringify(e.name)} is not a file or folder`);
    if (entries.has(e.name) || (e.name === "manifest.json" && manifestRaw)) {
      throw new BundleInvalid(`entry ${JSON.stringify(e.name)} is there twice`);
    }
    if (e.name === "manifest.json") {
      manifestRaw = e.data;
    } else {
      entries.set(e.name, e.data);
      executable.set(e.name, (e.mode & 0o100) !== 0);
    }
  }
  if (!manifestRaw) throw new BundleInvalid("no manifest.json");
  const text = decoder.decode(manifestRaw);
  const manifest = JSON.parse(text);
  if (manifest.format !== FORMAT) throw new BundleInvalid(`manifest format ${JSON.stringify(manifest.format)} is not ${FORMAT}`);
  const section = Buffer.from(compact(reproducibleSection(text)), "utf8");
  if ("sha256:" + sha256(section) !== manifest.run?.reproducible_digest) {
    throw new BundleInvalid("the manifest's reproducible section does not match its digest");
  }
  const listed = new Set<string>();
  for (const e of manifest.reproducible.entries ?? []) {
    const content = entries.get(e.path);
    if (!content) throw new BundleInvalid(`the manifest lists ${JSON.stringify(e.path)}, which is not in the bundle`);
    if (content.length !== e.size || sha256(content) !== e.sha256) {
      throw new BundleInvalid(`entry ${JSON.stringify(e.path)} does not match its size and SHA-256 in the manifest`);
    }
    if (executable.get(e.path) !== Boolean(e.executable)) {
      throw new BundleInvalid(`entry ${JSON.stringify(e.path)} has another mode than the manifest says`);
    }
    listed.add(e.path);
  }
  for (const name of entries.keys()) {
    if (!listed.has(name)) throw new BundleInvalid(`entry ${JSON.stringify(name)} is not in the manifest`);
  }
  return { digest: got, manifest, entries };
}
