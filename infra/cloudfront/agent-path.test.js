// Tests of agent-path.js, the CloudFront viewer-request function, with Node's built-in
// test runner: `node --test infra/cloudfront/agent-path.test.js` (internal/stack runs it
// under `go test`). The code is loaded the way CloudFormation deploys it: the !Sub
// placeholder replaced by a stage name, then evaluated as a plain script (the
// cloudfront-js-2.0 runtime has no modules) in a fresh context.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');

const SOURCE = fs.readFileSync(path.join(__dirname, 'agent-path.js'), 'utf8');

// substitute does what Fn::Sub does to the file: every dollar-brace reference must be a
// known parameter.
function substitute(source, params) {
    return source.replace(/\$\{([^}]*)\}/g, (whole, name) => {
        assert.ok(Object.hasOwn(params, name), `unexpected reference ${whole} in agent-path.js`);
        return params[name];
    });
}

function load(stage) {
    const code = substitute(SOURCE, { Stage: stage }) + '\nhandler;';
    return vm.runInNewContext(code, {}, { filename: 'agent-path.js' });
}

const handler = load('prod');

// plain copies a value out of the function's context, whose objects have that context's
// prototypes, so that deepStrictEqual compares structure only.
function plain(value) {
    return JSON.parse(JSON.stringify(value));
}

function viewerRequest(uri, querystring) {
    return {
        version: '1.0',
        context: { eventType: 'viewer-request', distributionDomainName: 'd111111abcdef8.cloudfront.net' },
        viewer: { ip: '203.0.113.24' },
        request: {
            method: 'GET',
            uri: uri,
            querystring: querystring || {},
            headers: {
                host: { value: 'd111111abcdef8.cloudfront.net' },
                authorization: { value: 'Bearer tt_sample' },
                upgrade: { value: 'websocket' },
                'sec-websocket-key': { value: 'x3JJHMbDL1EzLkh9GBhXDw==' },
                'sec-websocket-version': { value: '13' },
            },
            cookies: {},
        },
    };
}

test('the file references no parameter but Stage', () => {
    const refs = SOURCE.match(/\$\{[^}]*\}/g) || [];
    assert.deepEqual(refs, ['${Stage}']);
});

test('fits the CloudFront Functions size limit (10 KB)', () => {
    assert.ok(Buffer.byteLength(SOURCE) <= 10240, `${Buffer.byteLength(SOURCE)} bytes`);
});

test('rewrites /agents/{agent_id}/ws to the stage with ?agent_id=', () => {
    const out = handler(viewerRequest('/agents/agent-1/ws'));
    assert.equal(out.uri, '/prod');
    assert.deepEqual(plain(out.querystring), { agent_id: { value: 'agent-1' } });
    assert.equal(out.statusCode, undefined);
    // Headers pass untouched: Authorization and the handshake reach API Gateway.
    assert.equal(out.headers.authorization.value, 'Bearer tt_sample');
    assert.equal(out.headers['sec-websocket-key'].value, 'x3JJHMbDL1EzLkh9GBhXDw==');
});

test('uses the stage CloudFormation substituted', () => {
    const out = load('v1_blue')(viewerRequest('/agents/a/ws'));
    assert.equal(out.uri, '/v1_blue');
});

test('the path wins over an agent_id in the query; other parameters pass through', () => {
    const out = handler(viewerRequest('/agents/agent-1/ws', {
        agent_id: { value: 'someone-else', multiValue: [{ value: 'someone-else' }, { value: 'x' }] },
        trace: { value: 'on' },
    }));
    assert.deepEqual(plain(out.querystring), { agent_id: { value: 'agent-1' }, trace: { value: 'on' } });
});

test('accepts every character of [A-Za-z0-9._-] and 128 of them', () => {
    for (const id of ['A', 'z', '0', 'a.b', 'a_b', 'a-b', '...', 'x'.repeat(128), 'Agent.07_x-Y']) {
        const out = handler(viewerRequest(`/agents/${id}/ws`));
        assert.equal(out.uri, '/prod', id);
        assert.equal(out.querystring.agent_id.value, id);
    }
});

test('answers 400 for an agent id outside [A-Za-z0-9._-]{1,128}', () => {
    for (const id of ['x'.repeat(129), 'a%2Fb', 'a%20b', 'a b', 'a:b', 'ä', '.', '..', 'a+b', 'a@b', '%2E%2E']) {
        const out = handler(viewerRequest(`/agents/${id}/ws`));
        assert.equal(out.statusCode, 400, id);
        assert.equal(out.statusDescription, 'Bad Request');
        assert.equal(out.uri, undefined, 'no request is forwarded');
    }
});

test('answers 404 for any other path', () => {
    for (const uri of ['/', '/ws', '/prod', '/agents', '/agents/', '/agents/a', '/agents/a/', '/agents/a/ws/',
        '/agents/a/ws/x', '/agents//ws', '/agents/a/b/ws', '/agent/a/ws', '/AGENTS/a/ws', '/agents/a/WS', '//agents/a/ws']) {
        const out = handler(viewerRequest(uri));
        assert.equal(out.statusCode, 404, uri);
        assert.equal(out.statusDescription, 'Not Found');
    }
});

test('refusals are never cached', () => {
    const out = handler(viewerRequest('/nowhere'));
    assert.equal(out.headers['cache-control'].value, 'no-store');
});
