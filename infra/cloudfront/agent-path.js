// CloudFront viewer-request function (runtime cloudfront-js-2.0) in front of the
// terret-ws WebSocket API. API Gateway WebSocket routes carry no path parameters, so
// the protocol's URL GET /agents/{agent_id}/ws becomes the stage path with the query
// parameter agent_id, which the connect function reads. An agent_id the client put in
// the query string is overwritten; other query parameters pass through.
//
// template.yaml embeds this file verbatim as the FunctionCode of AgentPathRewrite under
// !Sub, which replaces the stage placeholder below; the file holds no other dollar-brace.
// internal/stack fails when the two copies differ.
var STAGE = '${Stage}';

var AGENT_PATH = /^\/agents\/([^\/]+)\/ws$/;
var AGENT_ID = /^[A-Za-z0-9._-]{1,128}$/;

function handler(event) {
    var request = event.request;
    var match = AGENT_PATH.exec(request.uri);
    if (!match) {
        return refuse(404, 'Not Found');
    }
    var agentId = match[1];
    // "." and ".." pass the charset but name path segments, never an agent.
    if (!AGENT_ID.test(agentId) || agentId === '.' || agentId === '..') {
        return refuse(400, 'Bad Request');
    }
    request.uri = '/' + STAGE;
    var query = request.querystring || {};
    query.agent_id = { value: agentId };
    request.querystring = query;
    return request;
}

function refuse(statusCode, statusDescription) {
    return {
        statusCode: statusCode,
        statusDescription: statusDescription,
        headers: { 'cache-control': { value: 'no-store' } }
    };
}
