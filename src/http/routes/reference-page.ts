import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, type onRequestAsyncHookHandler } from 'fastify';
import { apiVersionNames, defaultApiVersion, newestApiVersion } from '../../api-versions.js';
import { partnerPath, partnerRoutes } from '../paths.js';
import { etagMatches } from './openapi.js';

/** Where partners read the API, under the partner prefix: `GET /partner/docs` redirects to `/partner/docs/`. */
const referencePagePath = partnerRoutes.referencePage;
/** The page's full path, as the renderer and the redirect need it (the routes are mounted under the prefix). */
const pageUrl = partnerPath(referencePagePath);
const scriptPath = `${pageUrl}/js/scalar.js`;
/** The script's immutable name, `scalar.<hash of its content>.js`: the page refers to it. */
const hashedScriptName = (hash: string) => `scalar.${hash}.js`;

function versionNote(version: string): string {
  const notes = [
    ...(version === newestApiVersion ? ['newest'] : []),
    ...(version === defaultApiVersion ? ['what a request without Partner-Api-Version gets'] : []),
  ];
  return notes.length > 0 ? ` (${notes.join('; ')})` : '';
}

/** Scalar's in-browser renderer, configured so that nothing leaves the partner's browser for a third party. */
const scalarConfiguration = {
  // The very documents the service serves, one per API version (the newest shown first); the page
  // fetches them from the same origin and offers the others in its document selector. Each title
  // says which version is the newest and which one a request without Partner-Api-Version gets, as
  // they differ (issue 37: the page opened on one, requests got the other).
  sources: [...apiVersionNames].reverse().map((version) => ({
    title: `API version ${version}${versionNote(version)}`,
    slug: version,
    url: `${partnerPath(partnerRoutes.openApi)}?version=${version}`,
    default: version === newestApiVersion,
  })),
  pageTitle: 'Partner Agent Status API reference',
  // An empty icon: otherwise the browser asks for /favicon.ico, which is not ours to serve (a 404).
  favicon: 'data:,',
  // Fonts would come from fonts.scalar.com; the in-page API client would go through proxy.scalar.com.
  withDefaultFonts: false,
  telemetry: false,
  hideClientButton: true,
  hideTestRequestButton: true,
  // Scalar's own services (AI agent, MCP, SDK generation, the developer toolbar) are not ours to offer.
  agent: { disabled: true },
  mcp: { disabled: true },
  showDeveloperTools: 'never' as const,
};

interface Asset {
  body: Buffer;
  gzipped: Buffer;
  etag: string;
  /** The file name under js/ that never changes content (served immutable). */
  hashedName: string;
}

interface ReferencePage {
  html: string;
  htmlEtag: string;
  contentSecurityPolicy: string;
  script: Asset;
}

/** `'sha256-…'` sources for every inline script of the page, so the policy needs no 'unsafe-inline' for scripts. */
function inlineScriptHashes(html: string): string[] {
  return [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map(
    ([, source]) =>
      `'sha256-${createHash('sha256')
        .update(source ?? '')
        .digest('base64')}'`,
  );
}

/**
 * Renders the page once, through @scalar/fastify-api-reference itself in an app of its own. The
 * package inlines its browser bundle (several megabytes) into its module, whose load costs memory
 * and time: that is paid on the first visit to the page, not by every replica at start.
 */
async function renderReferencePage(): Promise<ReferencePage> {
  const { default: scalar } = await import('@scalar/fastify-api-reference');
  const renderer: FastifyInstance = Fastify({ logger: false });
  try {
    await renderer.register(scalar, { routePrefix: pageUrl, configuration: scalarConfiguration });
    const [page, script] = await Promise.all([renderer.inject(`${pageUrl}/`), renderer.inject(scriptPath)]);
    if (page.statusCode !== 200 || script.statusCode !== 200)
      throw new Error(`the reference page did not render (${page.statusCode}, ${script.statusCode})`);
    const scriptBody = script.rawPayload;
    const hash = createHash('sha256').update(scriptBody).digest('base64url').slice(0, 27);
    const hashedName = hashedScriptName(createHash('sha256').update(scriptBody).digest('hex').slice(0, 16));
    // The page loads the script by its immutable name, so a browser keeps it for a year and never asks again.
    const html = page.body.replaceAll('src="js/scalar.js"', `src="js/${hashedName}"`);
    if (html === page.body) throw new Error('the reference page does not load js/scalar.js');
    const contentSecurityPolicy = [
      "default-src 'none'",
      `script-src 'self' ${inlineScriptHashes(html).join(' ')}`,
      // The bundle injects its styles at run time (style elements and attributes): those cannot
      // carry a hash, and style injection cannot run code.
      "style-src 'self' 'unsafe-inline'",
      "img-src 'self' data:",
      "font-src 'self' data:",
      // The OpenAPI document, from this origin only.
      "connect-src 'self'",
      "base-uri 'none'",
      "form-action 'none'",
      "frame-ancestors 'none'",
    ].join('; ');
    return {
      html,
      htmlEtag: `"${createHash('sha256').update(html).digest('base64url').slice(0, 27)}"`,
      contentSecurityPolicy,
      script: { body: scriptBody, gzipped: await promisify(gzip)(scriptBody), etag: `"${hash}"`, hashedName },
    };
  } finally {
    await renderer.close();
  }
}

/**
 * The partner reference page: Scalar's renderer over the OpenAPI document of `GET
 * /partner/openapi.json`, with every asset served from the package (nothing from a CDN) and a content
 * security policy on the HTML. It needs no key and is not rate limited (authentication and the rate
 * limit are hooks of the agent routes only), and it is left out of the OpenAPI document.
 *
 * The page is rendered on its first request and kept. The HTML is cacheable for 5 minutes and
 * revalidated by its ETag (304 on If-None-Match). The page loads the script under a name that holds its content's hash,
 * served `immutable` for a year; under its plain name it is cacheable for an hour and revalidated by
 * its ETag. Either way it is gzipped once, at render, and sent compressed to every client that
 * accepts gzip: a visit costs the compressed bundle once per browser, not per page view.
 */
export async function referencePageRoutes(app: FastifyInstance, options: { shed?: onRequestAsyncHookHandler }): Promise<void> {
  let rendered: Promise<ReferencePage> | undefined;
  const page = () => {
    rendered ??= renderReferencePage().catch((error: unknown) => {
      rendered = undefined; // a failed render is tried again on the next visit
      throw error;
    });
    return rendered;
  };
  const hidden = { schema: { hide: true }, ...(options.shed ? { onRequest: options.shed } : {}) };

  app.get(referencePagePath, hidden, async (_request, reply) => reply.redirect(`${pageUrl}/`, 301));

  app.get(`${referencePagePath}/`, hidden, async (request, reply) => {
    const { html, htmlEtag, contentSecurityPolicy } = await page();
    reply.header('content-security-policy', contentSecurityPolicy).header('etag', htmlEtag).header('cache-control', 'public, max-age=300');
    if (etagMatches(request.headers['if-none-match'], htmlEtag)) return reply.code(304).send();
    return reply.type('text/html; charset=utf-8').send(html);
  });

  app.get<{ Params: { file: string } }>(
    `${referencePagePath}/js/:file`,
    hidden,
    async (request: FastifyRequest<{ Params: { file: string } }>, reply: FastifyReply) => {
      const { script } = await page();
      const immutable = request.params.file === script.hashedName;
      if (!immutable && request.params.file !== 'scalar.js') return reply.callNotFound();
      // Replaces the app's no-store: the bundle only changes with the package version.
      reply
        .header('cache-control', immutable ? 'public, max-age=31536000, immutable' : 'public, max-age=3600')
        .header('etag', script.etag)
        .header('vary', 'accept-encoding');
      if (etagMatches(request.headers['if-none-match'], script.etag)) return reply.code(304).send();
      reply.type('application/javascript; charset=utf-8');
      if (/\bgzip\b/.test(String(request.headers['accept-encoding'] ?? '')))
        return reply.header('content-encoding', 'gzip').send(script.gzipped);
      return reply.send(script.body);
    },
  );
}
