// Transpiles one TypeScript program to JavaScript for Node.js: argv is
// the output's path, then the program's. Diagnostics (syntax errors) go
// to stderr and exit 1: the run ends COMPILE_ERROR without running it.
"use strict";
const fs = require("fs");
const ts = require("typescript");

const [out, source] = process.argv.slice(2);
const result = ts.transpileModule(fs.readFileSync(source, "utf8"), {
  fileName: source,
  reportDiagnostics: true,
  compilerOptions: {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    esModuleInterop: true,
    // Stack traces name the program's own lines (node --enable-source-maps).
    inlineSourceMap: true,
    inlineSources: true,
  },
});
if (result.diagnostics.length > 0) {
  process.stderr.write(
    ts.formatDiagnostics(result.diagnostics, {
      getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => process.cwd(),
      getNewLine: () => "\n",
    }),
  );
  process.exit(1);
}
fs.writeFileSync(out, result.outputText);
