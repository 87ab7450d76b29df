import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError } from '../../errors.js';
import { writeAudit } from '../audit/service.js';
import { isUuid } from '../../lib/ids.js';
import { checkConfig } from './checks.js';

/**
 * Templates (docs/templates.md): the operator's catalogue (docs/operator.md paths, every call audited with actor `operator`)
 * and the active templates signed-in users choose from. A template with deployments cannot be deleted
 * (409): deactivate it instead (docs/templates.md).
 */
export interface TemplateRow {
  id: string;
  name: string;
  slug: string;
  description: string | null;
  category: string | null;
  icon_url: string | null;
  config: Record<string, unknown>;
  is_active: boolean;
  created_at: Date;
  updated_at: Date;
}

export interface TemplateView {
  id: string;
  name: string;
  slug: string;
  description: string | null;
  category: string | null;
  icon_url: string | null;
  config: Record<string, unknown>;
  is_active: boolean;
  created_at: string;
  updated_at: string;
}

export interface TemplateInput {
  name?: string | undefined;
  slug?: string | undefined;
  description?: string | null | undefined;
  category?: string | null | undefined;
  icon_url?: string | null | undefined;
  config?: Record<string, unknown> | undefined;
  is_active?: boolean | undefined;
}

export const templateView = (t: TemplateRow): TemplateView => ({
  id: t.id,
  name: t.name,
  slug: t.slug,
  description: t.description,
  category: t.category,
  icon_url: t.icon_url,
  config: t.config,
  is_active: t.is_active,
  created_at: t.created_at.toISOString(),
  updated_at: t.updated_at.toISOString(),
});

const slugTaken = (slug: string) => new AppError('CONFLICT', `The template slug "${slug}" is taken`);

function isUniqueViolation(err: unknown, constraint: string): boolean {
  return (err as { code?: string }).code === '23505' && String((err as Error).message).includes(constraint);
}

/** A template by id, or null (a malformed id is simply not found). */
export async function findTemplate(db: Queryable, id: string): Promise<TemplateRow | null> {
  if (!isUuid(id)) return null;
  const rows = await db.query<TemplateRow>('SELECT * FROM templates WHERE id = $1', [id]);
  return rows[0] ?? null;
}

export async function adminListTemplates(ctx: Ctx): Promise<TemplateView[]> {
  const rows = await ctx.db.query<TemplateRow>('SELECT * FROM templates ORDER BY name, id');
  await writeAudit(ctx.db, ctx, { organizationId: null, action: 'read', resourceType: 'template', resourceId: null });
  return rows.map(templateView);
}

/** GET /templates: what a signed-in user may deploy. */
export async function listActiveTemplates(ctx: Ctx): Promise<TemplateView[]> {
  const rows = await ctx.db.query<TemplateRow>('SELECT * FROM templates WHERE is_active ORDER BY name, id');
  return rows.map(templateView);
}

export async function adminCreateTemplate(ctx: Ctx, input: TemplateInput & { name: string; slug: string }): Promise<TemplateView> {
  const config = checkConfig(input.config ?? {});
  const now = ctx.clock.now();
  try {
    return await ctx.db.transaction(async (tx) => {
      const rows = await tx.query<TemplateRow>(
        `INSERT INTO templates (name, slug, description, category, icon_url, config, is_active, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING *`,
        [input.name, input.slug, input.description ?? null, input.category ?? null, input.icon_url ?? null, JSON.stringify(config), input.is_active ?? true, now],
      );
      const created = rows[0]!;
      await writeAudit(tx, ctx, { organizationId: null, action: 'create', resourceType: 'template', resourceId: created.id, metadata: { slug: created.slug, name: created.name } });
      return templateView(created);
    });
  } catch (err) {
    if (isUniqueViolation(err, 'templates_slug_key')) throw slugTaken(input.slug);
    throw err;
  }
}

export async function adminUpdateTemplate(ctx: Ctx, id: string, input: TemplateInput): Promise<TemplateView> {
  const config = input.config === undefined ? undefined : checkConfig(input.config);
  const before = await findTemplate(ctx.db, id);
  if (!before) throw new NotFoundError('Template');
  const pick = <K extends keyof TemplateInput & keyof TemplateRow>(key: K) => (input[key] === undefined ? before[key] : input[key]);
  try {
    return await ctx.db.transaction(async (tx) => {
      const rows = await tx.query<TemplateRow>(
        `UPDATE templates SET name = $2, slug = $3, description = $4, category = $5, icon_url = $6, config = $7, is_active = $8, updated_at = $9
         WHERE id = $1 RETURNING *`,
        [id, pick('name'), pick('slug'), pick('description'), pick('category'), pick('icon_url'), JSON.stringify(config ?? before.config), pick('is_active'), ctx.clock.now()],
      );
      const after = rows[0];
      if (!after) throw new NotFoundError('Template');
      await writeAudit(tx, ctx, {
        organizationId: null,
        action: 'update',
        resourceType: 'template',
        resourceId: id,
        metadata: { before: templateView(before), after: templateView(after) },
      });
      return templateView(after);
    });
  } catch (err) {
    if (isUniqueViolation(err, 'templates_slug_key')) throw slugTaken(input.slug ?? before.slug);
    throw err;
  }
}

/** Refused with 409 while any deployment (of any organization) uses the template. */
export async function adminDeleteTemplate(ctx: Ctx, id: string): Promise<TemplateView> {
  const before = await findTemplate(ctx.db, id);
  if (!before) throw new NotFoundError('Template');
  return ctx.db.transaction(async (tx) => {
    // Locks the template row: a deployment created meanwhile waits for this and then finds it gone.
    const locked = await tx.query<TemplateRow>('SELECT * FROM templates WHERE id = $1 FOR UPDATE', [id]);
    if (!locked[0]) throw new NotFoundError('Template');
    const used = await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM template_deployments WHERE template_id = $1', [id]);
    const n = used[0]?.n ?? 0;
    if (n > 0) {
      throw new AppError('CONFLICT', `The template has ${n} deployment${n === 1 ? '' : 's'}; deactivate it (is_active: false) instead, or delete them first`);
    }
    await tx.query('DELETE FROM templates WHERE id = $1', [id]);
    await writeAudit(tx, ctx, { organizationId: null, action: 'delete', resourceType: 'template', resourceId: id, metadata: { slug: before.slug } });
    return templateView(locked[0]);
  });
}
