import { afterEach, describe, expect, it } from 'vitest';
import { ApiError, apiUrl, errorFromResponse, onUnauthenticated, request, setFetch } from '../../src/lib/api/client';

function respond(status: number, body: string, type = 'application/json'): typeof fetch {
  return (async () => new Response(status === 204 ? null : body, { status, headers: { 'content-type': type } })) as typeof fetch;
}

afterEach(() => setFetch((input, init) => fetch(input, init)));

describe('errorFromResponse', () => {
  it('takes the words and fields of a problem document', () => {
    const e = errorFromResponse(
      422,
      'application/problem+json',
      JSON.stringify({
        type: 'urn:banhub:problem:config_invalid',
        title: 'fail2ban refused the configuration',
        status: 422,
        detail: 'fail2ban -t failed',
        code: 'config_invalid',
        details: ['ERROR No section: sshd'],
      }),
    );
    expect(e).toBeInstanceOf(ApiError);
    expect(e.message).toBe('fail2ban -t failed');
    expect(e.code).toBe('config_invalid');
    expect(e.details).toEqual(['ERROR No section: sshd']);
    expect(e.status).toBe(422);
  });

  it('keeps the field of a validation error and the version of a conflict', () => {
    const invalid = errorFromResponse(422, 'application/problem+json', JSON.stringify({ detail: 'ip: bad', code: 'invalid_field', field: 'ip' }));
    expect(invalid.field).toBe('ip');
    const conflict = errorFromResponse(409, 'application/problem+json', JSON.stringify({ detail: 'changed', code: 'config_conflict', currentVersion: 'abc' }));
    expect(conflict.currentVersion).toBe('abc');
  });

  it('describes a body that is not a problem document by its status and an excerpt', () => {
    const e = errorFromResponse(502, 'text/plain', 'upstream connect error\n  or disconnect');
    expect(e.code).toBe('http_502');
    expect(e.message).toBe('The host or its fail2ban failed (HTTP 502): upstream connect error or disconnect');
  });

  it('never shows the markup of an HTML error page', () => {
    const e = errorFromResponse(503, 'text/html', '<html><body><h1>503 Service Unavailable</h1></body></html>');
    expect(e.message).toBe('The server is unavailable (HTTP 503).');
  });

  it('survives JSON that does not parse', () => {
    const e = errorFromResponse(500, 'application/json', '{not json');
    expect(e.status).toBe(500);
    expect(e.message).toContain('HTTP 500');
  });

  it('flags 401 and 403', () => {
    expect(errorFromResponse(401, 'application/problem+json', JSON.stringify({ detail: 'log in', code: 'unauthenticated' })).unauthenticated).toBe(true);
    expect(errorFromResponse(403, 'application/problem+json', JSON.stringify({ detail: 'no', code: 'forbidden' })).forbidden).toBe(true);
  });
});

describe('request', () => {
  it('sends JSON, the server header and a base-relative URL', async () => {
    let seen: { url: string; init: RequestInit } | null = null;
    setFetch(async (url, init) => {
      seen = { url, init };
      return new Response('{"ok":true}', { status: 200, headers: { 'content-type': 'application/json' } });
    });
    const result = await request<{ ok: boolean }>('POST', '/api/jails/sshd/ban/192.0.2.1', { body: { a: 1 }, server: 'srv-1', query: { x: 'y', empty: '' } });
    expect(result).toEqual({ ok: true });
    expect(seen!.url).toBe('api/jails/sshd/ban/192.0.2.1?x=y');
    const headers = seen!.init.headers as Record<string, string>;
    expect(headers['X-BanDaemon-Server']).toBe('srv-1');
    expect(headers['Content-Type']).toBe('application/json');
    expect(seen!.init.body).toBe('{"a":1}');
  });

  it('returns undefined for 204', async () => {
    setFetch(respond(204, ''));
    await expect(request('DELETE', 'api/servers/x')).resolves.toBeUndefined();
  });

  it('throws the problem and tells the listeners about a 401', async () => {
    setFetch(respond(401, JSON.stringify({ detail: 'the session expired', code: 'unauthenticated', status: 401 }), 'application/problem+json'));
    const heard: string[] = [];
    const stop = onUnauthenticated((e) => heard.push(e.message));
    await expect(request('GET', 'api/servers')).rejects.toMatchObject({ status: 401, message: 'the session expired' });
    stop();
    expect(heard).toEqual(['the session expired']);
  });

  it('turns a failed connection into words', async () => {
    setFetch(async () => {
      throw new TypeError('Failed to fetch');
    });
    await expect(request('GET', 'api/servers')).rejects.toMatchObject({ code: 'network', status: 0 });
  });

  it('refuses a success that is not JSON', async () => {
    setFetch(respond(200, '<html>', 'text/html'));
    await expect(request('GET', 'api/servers')).rejects.toMatchObject({ code: 'bad_response' });
  });
});

describe('apiUrl', () => {
  it('is relative and leaves out empty values', () => {
    expect(apiUrl('/api/events/bans', { jail: 'sshd', ip: undefined, q: '', limit: 50 })).toBe('api/events/bans?jail=sshd&limit=50');
    expect(apiUrl('auth/status')).toBe('auth/status');
  });
});

describe('a lockout guard refusal', () => {
  it('keeps the entry that protects the address', () => {
    const e = errorFromResponse(
      422,
      'application/problem+json',
      JSON.stringify({
        status: 422,
        code: 'guard_protected_network',
        detail: 'is protected',
        field: 'ip',
        protectedBy: { network: '192.0.2.0/24', kind: 'configured', note: 'office' },
      }),
    );
    expect(e.field).toBe('ip');
    expect(e.protectedBy).toEqual({ network: '192.0.2.0/24', kind: 'configured', note: 'office' });
    expect(errorFromResponse(422, 'application/json', '{"detail":"x"}').protectedBy).toBeUndefined();
  });
});
