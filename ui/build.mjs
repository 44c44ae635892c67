// Build the console into one directory (default ../app/ui/static, or the first argument): the bundle
// esbuild makes from src/main.tsx, the hand-written page and style, and the licences of what the bundle
// holds. The output depends only on the sources and the locked packages, so `make ui` rebuilds the
// committed files byte for byte (tests/app/ui/test_console_build.py checks it).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = resolve(process.argv[2] ?? join(here, "..", "app", "ui", "static"));

rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.tsx")],
  outfile: join(outdir, "console.js"),
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});
copyFileSync(join(here, "src", "index.html"), join(outdir, "index.html"));
copyFileSync(join(here, "src", "console.css"), join(outdir, "console.css"));
// The bundle holds Preact alone (esbuild and TypeScript only build it): its licence ships beside it.
const preact = readFileSync(join(here, "node_modules", "preact", "LICENSE"), "utf8");
const version = JSON.parse(readFileSync(join(here, "node_modules", "preact", "package.json"), "utf8")).version;
writeFileSync(
  join(outdir, "LICENSES.txt"),
  `console.js bundles Preact ${version} (https://preactjs.com), under this licence:\n\n${preact}`,
);
