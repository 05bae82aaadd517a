// Runs upstream's own command synthesis (vllm-project/recipes src/lib/command-synthesis.js,
// fetched by the test into a git-ignored cache, never part of this project) over requests
// that oracle_test.go writes, and prints what upstream renders for each. Our code, not
// upstream's: it only loads the tree the way upstream's site does and calls resolveCommand.
//
// usage: node oracle.mjs <command-synthesis.mjs> <js-yaml module dir> <recipes dir> < requests.json
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [synthesisFile, yamlDir, recipesDir] = process.argv.slice(2);
const yaml = createRequire(path.join(yamlDir, "noop.js"))("js-yaml");
const cs = await import(pathToFileURL(synthesisFile).href);

const readYaml = (f) => yaml.load(fs.readFileSync(f, "utf8"));
const taxonomy = readYaml(path.join(recipesDir, "taxonomy.yaml"));
const strategies = {};
for (const dir of ["strategies", "kv_store"]) {
  const full = path.join(recipesDir, dir);
  if (!fs.existsSync(full)) continue;
  for (const f of fs.readdirSync(full).filter((f) => f.endsWith(".yaml"))) {
    const s = readYaml(path.join(full, f));
    strategies[s.name] = s;
  }
}
const recipes = new Map();
const recipe = (file) => {
  if (!recipes.has(file)) recipes.set(file, readYaml(path.join(recipesDir, file)));
  return recipes.get(file);
};

// The features upstream's builder turns on by default (its defaultFeaturesFor): every
// feature but the opt-in ones, a variant's default_modes forcing theirs on, in recipe order.
function defaultFeatures(r, hw, variant) {
  const optIn = new Set(r.opt_in_features || []);
  for (const f of r.hardware_opt_in_features?.[hw] || []) optIn.add(f);
  const forced = new Set(Object.keys(r.variants?.[variant]?.default_modes || {}));
  return Object.keys(r.features || {}).filter((f) => forced.has(f) || !optIn.has(f));
}

const str = (v) => (v === null || v === undefined ? v : String(v));
const requests = JSON.parse(fs.readFileSync(0, "utf8"));
const out = requests.map((q) => {
  try {
    const r = recipe(q.file);
    const features = q.features ?? defaultFeatures(r, q.hardware, q.variant);
    const res = cs.resolveCommand(r, q.variant, q.strategy, q.hardware, features, strategies, taxonomy,
      [], q.nodes, null, q.modes || {}, q.kvOffload || null);
    const variant = r.variants?.[q.variant] || r.variants?.default || {};
    const meta = cs.computeDockerMeta(r, variant, taxonomy.hardware_profiles[q.hardware], q.hardware);
    const env = res.deployType === "kv_store_lb" ? res.vllm?.env : res.env;
    return {
      deployType: res.deployType,
      argv: (res.argv || res.headArgv || res.vllm?.argv || []).map(str),
      workerArgvs: (res.workerArgvs || []).map((a) => a.map(str)),
      env: Object.entries(env || {}).map(([k, v]) => [k, str(v)]),
      image: meta.image ?? null,
      features,
    };
  } catch (e) {
    return { error: String(e?.stack || e) };
  }
});
process.stdout.write(JSON.stringify(out));
