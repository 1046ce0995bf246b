// Preload for real MCP peers: `node --require tests/peers/localhost.cjs server.js ...`
//
// server-everything, the TypeScript SDK examples and the conformance mock servers call
// listen(PORT) with no host, which binds every interface. Tests here must only use loopback,
// so a TCP listen() without a host binds 127.0.0.1 instead (override: env
// ALBEDO_LISTEN_HOST). Every form is covered: listen(), listen(port), listen(port, cb),
// listen(port, backlog, cb), listen({port}), listen({port}, cb), with port a number or a
// numeric string. Pipes, handles and fds, and calls that name a host, are left alone.
//
// listen(0) stays synchronous: server.address() is valid right after it returns (the
// conformance mocks read it at once). Passing a host to listen() would not keep that, since
// Node then resolves the host with dns.lookup and binds on a later tick. So the host is put
// in at the step below that: net.Server.prototype._listen2 (setupListenHandle), which Node
// calls synchronously with address == null when no host was given. If a Node version lacks
// _listen2, listen() itself is wrapped (binding then happens a tick later).
'use strict';
const net = require('net');

const HOST = process.env.ALBEDO_LISTEN_HOST || '127.0.0.1';
const FAMILY = net.isIPv6(HOST) ? 6 : 4;
const proto = net.Server.prototype;

if (typeof proto._listen2 === 'function') {
  const orig = proto._listen2;
  proto._listen2 = function (address, port, addressType, backlog, fd, flags) {
    // address == null and port >= 0: a TCP listen with no host (port -1 = handle/fd).
    if ((address === null || address === undefined) && typeof port === 'number' && port >= 0 &&
        (fd === undefined || fd === null)) {
      return orig.call(this, HOST, port, FAMILY, backlog, fd, flags);
    }
    return orig.apply(this, arguments);
  };
} else {
  const isPort = (v) => typeof v === 'number' ||
    (typeof v === 'string' && v.trim() !== '' && Number.isInteger(Number(v)));
  const origListen = proto.listen;
  proto.listen = function (...args) {
    const a0 = args[0];
    if (args.length === 0 || typeof a0 === 'function') {
      args.unshift(0, HOST);
    } else if (isPort(a0) && typeof args[1] !== 'string') {
      args.splice(1, 0, HOST);
    } else if (a0 !== null && typeof a0 === 'object' && !a0._handle && !a0.handle &&
               a0.fd === undefined && a0.path === undefined && !a0.host) {
      args[0] = Object.assign({}, a0, { host: HOST });
    }
    return origListen.apply(this, args);
  };
}
