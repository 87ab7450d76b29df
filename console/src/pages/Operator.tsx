import { PageHeader } from '../ui';

export function Operator() {
  return <PageHeader title="Operator" />;
}
