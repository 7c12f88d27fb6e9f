// sandboxd's pre-started Node.js: run as `node -e THIS MODULE...` in a
// pooled container, before any untrusted code is in it. It loads the
// recipe's modules, then waits on fd 3 for its program (see prestart.go)
// and runs it as `node PATH ARGS...` would: as the main module.
(() => {
  const fs = require('fs');
  const Module = require('module');
  for (const name of process.argv.slice(1)) {
    try {
      require(name);
    } catch {
      // the program meets the same error if it requires it
    }
  }
  const input = fs.readFileSync(3);
  fs.closeSync(3);
  if (input.length === 0) {
    process.exit(0); // no program came: the container is ending
  }
  const fields = input.toString('utf8').split('\0');
  const argc = Number(fields[1]);
  const argv = fields.slice(2, 2 + argc);
  for (const key of Object.keys(process.env)) {
    delete process.env[key];
  }
  for (const kv of fields.slice(2 + argc)) {
    const eq = kv.indexOf('=');
    if (eq > 0) {
      process.env[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
  }
  process.chdir(fields[0]);
  process.argv = [process.execPath, ...argv.slice(1)];
  process.execArgv = [];
  delete process._eval;
  // What -e puts on the global object, and a file's main module has not.
  for (const name of ['module', 'exports', 'require', '__filename', '__dirname']) {
    delete globalThis[name];
  }
  Module.runMain();
})();
