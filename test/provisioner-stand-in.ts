import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A template provisioner on loopback for tests (docs/templates.md, Provisioners): verifies both signatures of every request
 * on its own (`x-service-signature`, the hex HMAC keyed with the secret as written, and the Standard Webhooks one keyed
 * with the decoded `whsec_` secret), records it, and answers from a plan per deployment id (the last
 * answer repeats; unknown deployments get 200 with no body).
 */
export interface ProvisionRequest {
  headers: IncomingHttpHeaders;
  body: {
    id: string;
    type: string;
    created_at: string;
    data: {
      attempt: number;
      template: { id: string; slug: string; name: string; config: Record<string, unknown> };
      deployment: { id: string; organization_id: string; template_id: string; name: string; subdomain: string; custom_domain: string | null; config: Record<string, unknown> };
    };
  };
  verified: boolean;
}

export interface PlannedAnswer {
  status: number;
  body?: unknown;
}

export interface ProvisionerStandIn {
  url: string;
  received: ProvisionRequest[];
  /** Requests for one deployment. */
  requestsFor(deploymentId: string): ProvisionRequest[];
  plan(deploymentId: string, ...answers: PlannedAnswer[]): void;
  close(): Promise<void>;
}

function verify(secret: string, headers: IncomingHttpHeaders, raw: Buffer): boolean {
  const same = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));
  const hex = createHmac('sha256', secret).update(raw).digest('hex');
  const id = String(headers['webhook-id'] ?? '');
  const timestamp = String(headers['webhook-timestamp'] ?? '');
  const standard = createHmac('sha256', Buffer.from(secret.slice('whsec_'.length), 'base64'))
    .update(`${id}.${timestamp}.`)
    .update(raw)
    .digest('base64');
  return same(String(headers['x-service-signature'] ?? ''), hex) && same(String(headers['webhook-signature'] ?? ''), `v1,${standard}`) && headers['x-service-timestamp'] === timestamp;
}

export async function startProvisioner(secret: string): Promise<ProvisionerStandIn> {
  const plans = new Map<string, { answers: PlannedAnswer[]; served: number }>();
  const received: ProvisionRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const body = JSON.parse(raw.toString('utf8')) as ProvisionRequest['body'];
      received.push({ headers: req.headers, body, verified: verify(secret, req.headers, raw) });
      const plan = plans.get(body.data.deployment.id);
      const answer = plan ? plan.answers[Math.min(plan.served++, plan.answers.length - 1)]! : { status: 200 };
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(answer.body === undefined ? '' : JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    requestsFor: (id) => received.filter((r) => r.body.data.deployment.id === id),
    plan(id, ...answers) {
      plans.set(id, { answers, served: 0 });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
