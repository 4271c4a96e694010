// schemas.js - the schema corpus (tests/data/schemas/*.json) and the validator
// the e2e tests check documents and replies with: ajv (draft 2020-12, strict)
// with ajv-formats in full mode.
import { readdirSync, readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const dir = join(dirname(fileURLToPath(import.meta.url)), '..', 'data', 'schemas');

export function schemaValidator() {
  const ajv = new Ajv2020({ strict: true, allErrors: false, validateFormats: true });
  addFormats(ajv, { mode: 'full' });
  return ajv;
}

export function corpus() {
  return readdirSync(dir).filter((f) => f.endsWith('.json')).sort().map((f) => ({
    name: f.replace(/\.json$/, ''), ...JSON.parse(readFileSync(join(dir, f), 'utf8')),
  }));
}

