// The schema corpus (tests/data/schemas/*.json) checked by a real JSON Schema
// validator: ajv (draft 2020-12, formats from ajv-formats in full mode) must
// accept every "valid" document, reject every "invalid" one, and accept the
// "ordered_only" ones (valid documents the grammar refuses on purpose: keys out
// of the schema's order). tests/unit/grammar/test_schema.c checks the grammar's
// recognizer against the same labels, so the two agree document by document.
// No server: this file only needs node_modules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { corpus, schemaValidator } from './schemas.js';

test('the corpus has varied schemas, each with valid and invalid documents', () => {
  const c = corpus();
  assert.ok(c.length >= 10, `only ${c.length} schemas`);
  for (const e of c) {
    assert.ok(e.valid.length >= 2, `${e.name}: too few valid documents`);
    assert.ok(e.invalid.length >= 3, `${e.name}: too few invalid documents`);
  }
});

for (const e of corpus()) {
  test(`ajv agrees with the corpus labels: ${e.name}`, () => {
    const validate = schemaValidator().compile(e.schema);
    e.valid.forEach((d, i) => assert.ok(validate(d), `${e.name} valid[${i}] rejected: ${JSON.stringify(validate.errors)}`));
    e.ordered_only.forEach((d, i) => assert.ok(validate(d), `${e.name} ordered_only[${i}] rejected by ajv`));
    e.invalid.forEach((d, i) => assert.ok(!validate(d), `${e.name} invalid[${i}] accepted: ${JSON.stringify(d)}`));
  });
}
